"""Cost of the anti-hacking checks: evaluation time of a small kernel with the full policy vs without.

Both sides use the same warm pool and the same cached build, interleaved so machine noise hits both.
Wall time is the target; the evaluated process's CPU time is printed beside it because it stays
steady on a machine shared with other jobs.
Target: the checks add <= 10% to the evaluation time.

    python bench/bench_guards.py [--n 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool
from kernelrl.tasks import example_path, load_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=30, help="evaluations per side")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_guards.json")
    args = parser.parse_args()
    task = load_task(example_path("scale_bias_relu.py"))
    candidate = Candidate.from_file(example_path("scale_bias_relu_cpu.py"))
    guarded = EvalConfig()
    unguarded = EvalConfig(guards=False, static_severity={"*": "warn"})
    times: dict[str, list[float]] = {"with checks": [], "without checks": []}
    cpu: dict[str, list[float]] = {"with checks": [], "without checks": []}
    stages: dict[str, dict[str, list[float]]] = {"with checks": {}, "without checks": {}}
    with EvalPool(workers=1) as pool:
        pool.evaluate(task, candidate, guarded)  # build once, fill the reference-timing cache
        pool.evaluate(task, candidate, unguarded)
        for _ in range(args.n):
            for name, config in (("with checks", guarded), ("without checks", unguarded)):
                start = time.perf_counter()
                result = pool.evaluate(task, candidate, config)
                times[name].append(time.perf_counter() - start)
                assert result.status == "ok", result.feedback
                cpu[name].append(sum(stage.cpu_s for stage in result.stages))
                for stage in result.stages:
                    stages[name].setdefault(stage.name, []).append(stage.duration_s)
    def median_ms(values: list[float]) -> float:
        return statistics.median(values) * 1e3

    print(f"task {task.id}, {args.n} evaluations per side, interleaved (medians)")
    print(f"  {'':16s} {'wall ms':>9s} {'cpu ms':>9s}   " + " ".join(f"{s:>11s}" for s in stages["with checks"]))
    for name in ("without checks", "with checks"):
        per_stage = " ".join(f"{median_ms(v):11.1f}" for v in stages[name].values())
        print(f"  {name:16s} {median_ms(times[name]):9.1f} {median_ms(cpu[name]):9.1f}   {per_stage}")
    wall = median_ms(times["with checks"]) / median_ms(times["without checks"]) - 1
    cpu_time = median_ms(cpu["with checks"]) / median_ms(cpu["without checks"]) - 1
    print(f"  checks add {wall * 100:.1f}% wall time, {cpu_time * 100:.1f}% CPU time of the evaluated process "
          f"(target <= 10%: {'met' if wall <= 0.10 else 'MISSED'})")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_guards", {
            "wall_ms": {k: median_ms(v) for k, v in times.items()}, "cpu_ms": {k: median_ms(v) for k, v in cpu.items()},
            "checks_wall_share": wall, "checks_cpu_share": cpu_time, "n": args.n}))

if __name__ == "__main__":
    main()
