"""Cost of the anti-hacking checks: evaluation time of a small kernel with the full policy vs without.

Both sides use the same warm pool and the same cached build, interleaved so machine noise hits both.
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
    args = parser.parse_args()
    task = load_task(example_path("scale_bias_relu.py"))
    candidate = Candidate.from_file(example_path("scale_bias_relu_cpu.py"))
    guarded = EvalConfig()
    unguarded = EvalConfig(guards=False, static_severity={"*": "warn"})
    times: dict[str, list[float]] = {"with checks": [], "without checks": []}
    with EvalPool(workers=1) as pool:
        pool.evaluate(task, candidate, guarded)  # build once, fill the reference-timing cache
        pool.evaluate(task, candidate, unguarded)
        for _ in range(args.n):
            for name, config in (("with checks", guarded), ("without checks", unguarded)):
                start = time.perf_counter()
                result = pool.evaluate(task, candidate, config)
                times[name].append(time.perf_counter() - start)
                assert result.status == "ok", result.feedback
    with_ms = statistics.median(times["with checks"]) * 1e3
    without_ms = statistics.median(times["without checks"]) * 1e3
    overhead = with_ms / without_ms - 1
    print(f"task {task.id}, {args.n} evaluations per side (median wall time per evaluation)")
    print(f"  without checks: {without_ms:8.1f} ms")
    print(f"  with checks:    {with_ms:8.1f} ms")
    print(f"  checks add {overhead * 100:.1f}% (target <= 10%: {'met' if overhead <= 0.10 else 'MISSED'})")


if __name__ == "__main__":
    main()
