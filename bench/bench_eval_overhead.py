"""Evaluation overhead and throughput: the warm worker pool vs a fresh Python process per evaluation.

The fresh-process design (start Python, import torch, evaluate, exit) is what a per-request
subprocess service does. Both sides evaluate the same small CPU kernel (builds cached), side by side
in one run. Overhead = wall time of one evaluation minus the time its pipeline stages took inside
the evaluated process (build, run, compare, time).

    python bench/bench_eval_overhead.py [--n 50] [--workers 2]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, EvalResult
from kernelrl.tasks import Task

TASK = """
import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""

CANDIDATE = '''
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp("""
void relu2(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = (x[i] > 0 ? x[i] : 0) * 2.0f; }
""", ["relu2"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        lib.relu2(x, y, x.numel())
        return y
'''


def stage_seconds(result: EvalResult) -> float:
    return sum(s.duration_s for s in result.stages)


def run_pool(task: Task, candidate: Candidate, config: EvalConfig, n: int, workers: int) -> tuple[list[float], list[float], float]:
    with EvalPool(workers=workers, config=config) as pool:
        pool.evaluate(task, candidate)  # first build fills the cache
        overheads, builds = [], []
        for _ in range(min(n, 20)):  # sequential: per-evaluation overhead without queueing
            start = time.perf_counter()
            result = pool.evaluate(task, candidate)
            overheads.append(time.perf_counter() - start - stage_seconds(result))
            builds.append(result.stage_seconds("build"))
        start = time.perf_counter()
        results = [r for _, r in pool.evaluate_many([(task, candidate)] * n)]
        elapsed = time.perf_counter() - start
    assert all(r.status == "ok" for r in results), [r.feedback for r in results if r.status != "ok"][:1]
    return overheads, builds, n / elapsed


def run_fresh(task: Task, candidate: Candidate, config: EvalConfig, n: int, workers: int) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory() as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps({"task": task.to_dict(), "candidate": candidate.to_dict(), "config": config.to_dict()}))

        def one() -> float:
            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "kernelrl.evaluate.supervisor", "--oneshot", str(job_path)],
                capture_output=True, text=True, check=True,
            )
            wall = time.perf_counter() - start
            result = EvalResult.from_dict(json.loads(proc.stdout)["result"])
            assert result.status == "ok", result.feedback
            return wall - stage_seconds(result)

        overheads = [one() for _ in range(min(n, 10))]
        start = time.perf_counter()
        with cf.ThreadPoolExecutor(workers) as executor:
            list(executor.map(lambda _: one(), range(n)))
        throughput = n / (time.perf_counter() - start)
    return overheads, throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50, help="evaluations per side")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_eval_overhead.json")
    args = parser.parse_args()
    task, candidate = Task(id="bench/relu2", source=TASK), Candidate(CANDIDATE)
    config = EvalConfig(timing_trials=10, timing_budget_s=0.05, cache_reference_timing=False)

    pool_overheads, builds, pool_tput = run_pool(task, candidate, config, args.n, args.workers)
    fresh_overheads, fresh_tput = run_fresh(task, candidate, config, args.n, args.workers)
    pool_ms, fresh_ms = statistics.median(pool_overheads) * 1e3, statistics.median(fresh_overheads) * 1e3
    print(f"{args.n} evaluations per side, {args.workers} workers, cached builds")
    print(f"{'':28}{'warm pool':>12}{'fresh process':>16}{'ratio':>10}")
    print(f"{'median overhead (ms)':28}{pool_ms:12.1f}{fresh_ms:16.1f}{fresh_ms / pool_ms:9.1f}x")
    print(f"{'throughput (evals/s)':28}{pool_tput:12.2f}{fresh_tput:16.2f}{pool_tput / fresh_tput:9.1f}x")
    print(f"median build stage of a repeated identical candidate: {statistics.median(builds) * 1e3:.2f} ms")
    print(f"targets: overhead <= 50 ms: {'met' if pool_ms <= 50 else 'MISSED'}; "
          f"throughput >= 10x: {'met' if pool_tput / fresh_tput >= 10 else 'MISSED'}; "
          f"build < 10 ms: {'met' if statistics.median(builds) < 0.010 else 'MISSED'}")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_eval_overhead", {
            "pool_overhead_ms": pool_ms, "fresh_overhead_ms": fresh_ms, "overhead_ratio": fresh_ms / pool_ms,
            "pool_evals_per_s": pool_tput, "fresh_evals_per_s": fresh_tput, "throughput_ratio": pool_tput / fresh_tput,
            "cached_build_ms": statistics.median(builds) * 1e3, "n": args.n, "workers": args.workers}))


if __name__ == "__main__":
    main()
