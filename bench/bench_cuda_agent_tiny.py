"""CUDA Agent's stages as a new user runs them: `kernelrl train --preset cuda-agent-tiny` in a fresh process,
from an empty build cache, timed; writes bench/results/cuda_agent_tiny.json from the run's own summary.json.

The record holds each stage's held-out numbers and its own metrics, the stage times, the wall time, the CPU
time of the whole process tree (the trainer and the gym's workers and compilers it reaped), the resolved
config and the revision, so `tests/repro/test_results_fresh.py` can tell when the numbers are stale. Takes
10-26 min on 2 shared cores.

    python bench/bench_cuda_agent_tiny.py [--out DIR] [--no-write] [KEY=VALUE ...]   (overrides go to `kernelrl train`)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run(out: Path, overrides: list[str]) -> dict[str, Any]:
    """Run the preset into `out` with an empty build cache; the record's numbers."""
    with tempfile.TemporaryDirectory() as cache_dir:
        env = {**os.environ, "KERNELRL_CACHE_DIR": cache_dir}
        command = [sys.executable, "-m", "kernelrl.cli", "train", "--preset", "cuda-agent-tiny", "--out", str(out),
                   "progress=false", *overrides]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads((out / "summary.json").read_text())
    stages = {name: {**d, "heldout": {k: v for k, v in d["heldout"].items() if k != "examples"}}
              for name, d in summary["stages"].items()}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"stages": stages, "times": summary["times"], "eval_cache": summary["eval_cache"], "wall_s": wall,
            "process_tree_cpu_s": cpu, "overrides": overrides, "config": summary["config"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="run directory (default: a temporary one)")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/cuda_agent_tiny.json")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides for kernelrl train")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        record = run(Path(args.out or Path(tmp) / "cuda-agent-tiny"), args.overrides)
    print(f"kernelrl train --preset cuda-agent-tiny: {record['wall_s']:.0f} s wall, "
          f"{record['process_tree_cpu_s']:.0f} s CPU (process tree)")
    for name, d in record["stages"].items():
        h = d["heldout"]
        print(f"  after {name}: greedy pass {h['pass_rate']:.3f}, fast_1 {h['fast_1']:.3f}, "
              f"sampled pass {h.get('sampled_pass_rate', float('nan')):.3f}")
    if not args.no_write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from results_file import write_result

        print("written:", write_result("cuda_agent_tiny", record))


if __name__ == "__main__":
    main()
