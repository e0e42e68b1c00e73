"""Synthesis throughput: validated synthesized tasks per second (eager filters, no torch.compile).

Every accepted task passed dedup (own and against the shipped suites), ran, was deterministic,
input-dependent, finite and inside the runtime window. Rejected candidates count against the rate.

    python bench/bench_synth.py [--n 100] [--seed 0] [--max-ops 4]
"""

from __future__ import annotations

import argparse
import json
import os

from kernelrl.tasks import suite_path
from kernelrl.tasks.synth import SynthConfig, synthesize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ops", type=int, default=4)
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_synth.json")
    args = parser.parse_args()
    synthesize(SynthConfig(n=3, seed=10_000 + args.seed))  # warm up torch's kernels and allocator
    result = synthesize(SynthConfig(n=args.n, seed=args.seed, max_ops=args.max_ops, exclude=[suite_path()]))
    report = {
        "accepted": len(result.tasks),
        "attempts": result.attempts,
        "seconds": round(result.elapsed_s, 2),
        "validated_tasks_per_s": round(result.rate, 2),
        "cores": len(os.sched_getaffinity(0)),
        "rejected": {k: v for k, v in result.rejected.items() if v},
    }
    print(json.dumps(report, indent=2))
    print(f"validated synthesized tasks per second: {result.rate:.2f}")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_synth", {**report, "n": args.n, "seed": args.seed, "max_ops": args.max_ops}))


if __name__ == "__main__":
    main()
