"""Cost of the trust split: one evaluation with the judge/candidate split vs the in-process pipeline it
replaced (the same evaluator at `--baseline-rev`, the last commit before the split), side by side.

Two warm pools, one per evaluator, each in a process of its own (one imports kernelrl from this tree, the
other from a git worktree of the baseline); rounds alternate between them so machine noise hits both.
Both evaluate the same small kernels with the same settings and cached reference timings; builds are
cached too, except for the "new source" kernel, whose C source differs in a comment at every evaluation,
as every fresh answer of an RL policy does, so each of its evaluations compiles.
Targets: the split costs <= 15% of a small kernel's evaluation wall time; warm-pool overhead (wall
time outside the evaluated stages) <= 50 ms.

    python bench/bench_trust_split.py [--n 10] [--rounds 4] [--baseline-rev ed5e12d] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_eval_overhead import CANDIDATE, TASK

ROOT = Path(__file__).resolve().parents[1]
SMALL_TASK = TASK.replace("n = 4096", "n = 1 << 16")  # bench_eval_overhead's kernel, 64k elements
SMALL_CANDIDATE = CANDIDATE


def worker() -> None:
    """Serve `run N` lines: N evaluations of each kernel; one JSON line of measurements per command."""
    from kernelrl.evaluate import Candidate, EvalConfig, EvalPool
    from kernelrl.tasks import Task, example_path, load_task

    relu = Task(id="bench/relu64k", source=SMALL_TASK)
    kernels = {
        "relu 64k": (relu, Candidate(SMALL_CANDIDATE), False),
        "relu 64k new source": (relu, Candidate(SMALL_CANDIDATE), True),
        "scale_bias_relu 2M": (load_task(example_path("scale_bias_relu.py")),
                               Candidate.from_file(example_path("scale_bias_relu_cpu.py")), False),
    }
    config = EvalConfig()
    fresh = iter(range(1 << 30))

    def variant(candidate: Candidate, new_source: bool) -> Candidate:
        if not new_source:
            return candidate
        marker = f"/* {os.getpid()}-{next(fresh)} */ void relu2("
        return Candidate(candidate.source.replace("void relu2(", marker, 1))

    with EvalPool(workers=1, sandbox="none") as pool:
        for task, candidate, _ in kernels.values():
            for _ in range(2):  # build once, fill the reference-timing cache, warm the worker
                assert pool.evaluate(task, candidate, config).status == "ok"
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            n = int(line.split()[1])
            out: dict[str, dict[str, list[float]]] = {}
            for name, (task, base, new_source) in kernels.items():
                record = out.setdefault(name, {"wall": [], "stages": [], "cpu": []})
                for _ in range(n):
                    candidate = variant(base, new_source)
                    start = time.perf_counter()
                    result = pool.evaluate(task, candidate, config)
                    record["wall"].append(time.perf_counter() - start)
                    assert result.status == "ok", result.feedback
                    record["stages"].append(sum(s.duration_s for s in result.stages))
                    record["cpu"].append(sum(s.cpu_s for s in result.stages))
            print(json.dumps(out), flush=True)


def start(src: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env, cwd=tempfile.gettempdir())
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    if not ready:
        raise SystemExit(f"the worker for {src} did not start")
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10, help="evaluations per kernel, side and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--baseline-rev", default="ed5e12d", help="the in-process evaluator to compare with")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_trust_split.json")
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    baseline = Path(tempfile.mkdtemp(prefix="kernelrl-baseline-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline_rev], cwd=ROOT, check=True,
                   capture_output=True)
    try:
        sides = {"in-process (baseline)": start(baseline / "src"), "trust split": start(ROOT / "src")}
        runs: dict[str, dict[str, dict[str, list[float]]]] = {side: {} for side in sides}
        for _ in range(args.rounds):
            for side, proc in sides.items():
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"run {args.n}\n")
                proc.stdin.flush()
                for kernel, record in json.loads(proc.stdout.readline()).items():
                    for key, values in record.items():
                        runs[side].setdefault(kernel, {}).setdefault(key, []).extend(values)
        for proc in sides.values():
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=60)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, capture_output=True)
    report(runs, args)


def report(runs: dict[str, dict[str, dict[str, list[float]]]], args: argparse.Namespace) -> None:
    def ms(values: list[float]) -> float:
        return statistics.median(values) * 1e3

    numbers: dict[str, dict[str, float]] = {}
    print(f"{args.rounds} rounds x {args.n} evaluations per kernel and side, interleaved (medians, ms)")
    print(f"  {'kernel':20s} {'side':22s} {'wall':>8s} {'cpu':>8s} {'overhead':>9s}")
    for kernel in runs["trust split"]:
        for side in runs:
            r = runs[side][kernel]
            overhead = ms([w - s for w, s in zip(r["wall"], r["stages"], strict=True)])
            numbers[f"{kernel} | {side}"] = {"wall_ms": ms(r["wall"]), "cpu_ms": ms(r["cpu"]), "overhead_ms": overhead}
            print(f"  {kernel:20s} {side:22s} {ms(r['wall']):8.1f} {ms(r['cpu']):8.1f} {overhead:9.1f}")
        split, base = ms(runs["trust split"][kernel]["wall"]), ms(runs["in-process (baseline)"][kernel]["wall"])
        cost = split / base - 1
        numbers[f"{kernel} | split cost"] = {"wall_ratio": split / base}
        print(f"  {kernel}: the split costs {cost * 100:+.1f}% wall time (target <= 15%: {'met' if cost <= 0.15 else 'MISSED'})")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_trust_split", numbers))


if __name__ == "__main__":
    main()
