"""Speedups of the shipped CPU reference solutions over eager PyTorch, through the real evaluation pool.

Both sides run on one thread (the evaluator's default). Writes a Markdown table when --out is given.

    python bench/bench_solutions.py [--workers 1] [--trials 20] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from pathlib import Path

import kernelrl
from kernelrl.evaluate import Candidate, EvalConfig, EvalPool
from kernelrl.tasks import load_solutions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1, help="1 keeps the two timed sides off each other's core")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_solutions.json")
    args = parser.parse_args()
    solutions = load_solutions("cpu")
    config = EvalConfig(correctness_trials=3, timing_trials=args.trials, timing_budget_s=1.0)
    src = str(Path(kernelrl.__file__).resolve().parents[1])
    rows = []
    with EvalPool(workers=args.workers, config=config, env={"PYTHONPATH": src}) as pool:
        pairs = [(s.task, Candidate(s.source, backend="cpu")) for s in solutions]
        for index, result in pool.evaluate_many(pairs):
            t = result.timing
            rows.append((solutions[index].task.id, result.status.value, t.reference_ms if t else None,
                         t.candidate_ms if t else None, t.speedup if t else None))
    rows.sort()
    speedups = [r[4] for r in rows if r[4]]
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} cores (shared, load average {os.getloadavg()[0]:.1f}), 1 thread per side, "
        f"median of up to {args.trials} trials. Noisy under load: treat single numbers as rough.",
        "",
        "| task | status | eager ms | solution ms | speedup |",
        "|---|---|---:|---:|---:|",
        *(f"| {tid} | {st} | {ref:.3f} | {cand:.3f} | {sp:.2f} |" for tid, st, ref, cand, sp in rows),
        "",
        f"{len(rows)} solutions, {sum(r[1] == 'ok' for r in rows)} ok; geometric-mean speedup {geomean:.2f}; "
        f"faster than eager: {sum(s > 1 for s in speedups)}/{len(speedups)}.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text("# CPU reference solutions: speedups over eager\n\n" + text + "\n")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_solutions", {
            "geomean_speedup": geomean, "solutions": len(rows), "ok": sum(r[1] == "ok" for r in rows),
            "faster_than_eager": sum(s > 1 for s in speedups), "workers": args.workers, "trials": args.trials,
            "tasks": [{"task": tid, "status": st, "eager_ms": ref, "solution_ms": cand, "speedup": sp}
                      for tid, st, ref, cand, sp in rows]}))


if __name__ == "__main__":
    main()
