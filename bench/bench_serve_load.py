"""Load test of `kernelrl serve` on loopback: many jobs from concurrent clients, zero lost.

Starts a server subprocess (fresh SQLite store) unless --url is given, submits --jobs cheap
evaluations from --clients concurrent client threads, waits for every result, audits the store
(every accepted job done with exactly one result), and prints queue latency (p50/p99, accepted ->
started), end-to-end latency and throughput.

    python bench/bench_serve_load.py --jobs 1000 --clients 8 --workers 2
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kernelrl.serve.client import ServeClient  # noqa: E402

TASK = {
    "id": "bench/relu",
    "source": (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n\n\n"
        "def get_inputs():\n    return [torch.randn(256)]\n\n\ndef get_init_inputs():\n    return []\n"
    ),
}
CANDIDATE = (
    "import torch\nimport torch.nn as nn\nfrom kernelrl.native import load_cpp\n\n"
    "lib = load_cpp(r\"\"\"\nvoid relu(const float* x, float* y, long n) {\n"
    "    for (long i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;\n}\n\"\"\", [\"relu\"])\n\n\n"
    "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n"
    "        lib.relu(x.contiguous(), y, x.numel())\n        return y\n"
)
CONFIG = {"measure_timing": False, "correctness_trials": 1}


def quantile(values: list[float], q: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, max(0, round(q * (len(data) - 1))))] if data else float("nan")


def start_server(db: Path, workers: int, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "kernelrl.cli", "serve", "--port", str(port), "--db", str(db), "--workers", str(workers)]
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise SystemExit("server did not start")


def run_client(url: str, token: str | None, index: int, count: int, out: list[dict], errors: list[str], gap: float) -> None:
    """One client: submit its jobs one by one (`gap` seconds apart), then wait for each result."""
    try:
        with ServeClient(url, token, max_concurrency=4, retries=30) as client:
            submitted = []
            for i in range(count):
                sent = time.time()
                job_id = client.submit(TASK, CANDIDATE, config=CONFIG, idempotency_key=f"bench-{index}-{i}")
                submitted.append((job_id, sent))
                if gap:
                    time.sleep(gap)
            for job_id, sent in submitted:
                result = client.wait(job_id)
                info = client.status(job_id)
                out.append({"id": job_id, "status": str(result.status), "queue_s": info["queue_s"],
                            "e2e_s": (info["finished"] or time.time()) - sent, "created": info["created"],
                            "finished": info["finished"]})
    except Exception as exc:
        errors.append(f"client {index}: {exc!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="worker slots of the server this script starts")
    parser.add_argument("--url", help="use a running server instead of starting one")
    parser.add_argument("--token", default=os.environ.get("KERNELRL_SERVE_TOKEN"))
    parser.add_argument("--port", type=int, default=8377)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="total submissions per second (0: as fast as possible, a saturated queue)")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_serve_load.json")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kernelrl-serve-bench-"))
    db = tmp / "jobs.sqlite"
    server = None if args.url else start_server(db, args.workers, args.port)
    url = args.url or f"http://127.0.0.1:{args.port}"
    try:
        results: list[dict] = []
        errors: list[str] = []
        shares = [args.jobs // args.clients + (1 if i < args.jobs % args.clients else 0) for i in range(args.clients)]
        gap = args.clients / args.rate if args.rate else 0.0
        started = time.time()
        threads = [threading.Thread(target=run_client, args=(url, args.token, i, n, results, errors, gap)) for i, n in enumerate(shares)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.time() - started
        metrics = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {args.token}"} if args.token else {}).text
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)

    lost = args.jobs - len(results)
    queue = [r["queue_s"] for r in results if r["queue_s"] is not None]
    e2e = [r["e2e_s"] for r in results]
    span = max(r["finished"] for r in results) - min(r["created"] for r in results) if results else float("nan")
    rate = f"{args.rate:g}/s" if args.rate else "unthrottled"
    print(f"jobs: {args.jobs} from {args.clients} concurrent clients ({rate}), server workers: {args.workers}")
    print(f"results: {len(results)}  lost: {lost}  client errors: {len(errors)}  statuses: {dict(Counter(r['status'] for r in results))}")
    if server is not None:
        with sqlite3.connect(db) as con:
            rows = con.execute("SELECT state, completions FROM jobs").fetchall()
        bad = [r for r in rows if r != ("done", 1)]
        print(f"store audit: {len(rows)} jobs, {len(bad)} not done with exactly one result")
        lost += len(bad) + abs(len(rows) - args.jobs)
    print(f"queue latency (accepted -> started): p50 {quantile(queue, 0.5) * 1e3:.1f} ms  p99 {quantile(queue, 0.99) * 1e3:.1f} ms")
    print(f"end-to-end latency (submit -> result): p50 {quantile(e2e, 0.5):.2f} s  p99 {quantile(e2e, 0.99):.2f} s"
          f"  mean {statistics.fmean(e2e) if e2e else float('nan'):.2f} s")
    print(f"throughput: {len(results) / span:.1f} jobs/s over {span:.1f} s (wall {wall:.1f} s)")
    restarts = next((line for line in metrics.splitlines() if line.startswith("kernelrl_worker_restarts_total")), "")
    print(f"server: {restarts}")
    for line in errors[:5]:
        print("error:", line)
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_serve_load", {
            "jobs": args.jobs, "clients": args.clients, "workers": args.workers, "rate": args.rate or "unthrottled",
            "results": len(results), "lost": lost, "client_errors": len(errors),
            "queue_latency_ms": {"p50": quantile(queue, 0.5) * 1e3, "p99": quantile(queue, 0.99) * 1e3},
            "e2e_latency_s": {"p50": quantile(e2e, 0.5), "p99": quantile(e2e, 0.99)},
            "jobs_per_s": len(results) / span, "span_s": span, "wall_s": wall}))
    return 0 if lost == 0 and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
