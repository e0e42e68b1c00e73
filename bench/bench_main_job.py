"""The main job as a new user runs it: `kernelrl train --preset tiny-cpu` in a fresh process, timed.

Writes bench/results/main_job_tiny_cpu.json from the run's own summary.json: held-out numbers after SFT
and after RL, the stage times, the wall time of the whole command, the median `time/generate` and
`time/evaluate_wait` per RL step, and the gym's cost per evaluation by part (p50/p95). Targets (the
gym-throughput issue, 2 idle cores): <= 3 min wall, median evaluate-wait <= 2x median generate. The record
holds the resolved config and the revision (`tests/repro/test_results_fresh.py` checks them). The run gets an
empty build cache of its own, as a new user's first run does (`--warm-cache`: the shared one, whose builds an
earlier run with the same seeds has already made: ~10 ms instead of ~90 ms per build).

    python bench/bench_main_job.py [--out DIR] [KEY=VALUE ...]   (overrides go to `kernelrl train`)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="run directory (default: a temporary one)")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/main_job_tiny_cpu.json")
    parser.add_argument("--warm-cache", action="store_true", help="use the shared build cache instead of an empty one")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides for kernelrl train")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or Path(tmp) / "tiny-cpu")
        command = [sys.executable, "-m", "kernelrl.cli", "train", "--preset", "tiny-cpu", "--out", str(out), *args.overrides]
        env = dict(os.environ)
        cold = None if args.warm_cache else Path.home() / ".cache" / f"kernelrl-bench-cold-{os.getpid()}"
        if cold is not None:  # beside the shared cache (same filesystem and permissions), removed afterwards
            cold.mkdir(mode=0o755, parents=True)
            env["KERNELRL_CACHE_DIR"] = str(cold)
        try:
            started = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
            wall = time.perf_counter() - started
        finally:
            if cold is not None:
                shutil.rmtree(cold, ignore_errors=True)
        summary = json.loads((out / "summary.json").read_text())
    heldout = {name: {k: v for k, v in summary[name].items() if k != "examples"} for name in ("after_sft", "after_rl")}
    steps = summary.get("rl_step_times", {})
    generate, wait = steps.get("time/generate"), steps.get("time/evaluate_wait")
    record: dict[str, Any] = {**heldout, "times": summary["times"], "eval_cache": summary["eval_cache"],
                              "rl_step_times": steps, "gym_costs": summary.get("gym_costs"), "wall_s": wall,
                              "overrides": args.overrides, "config": summary["config"],
                              "build_cache": "warm" if args.warm_cache else "empty"}
    print(f"kernelrl train --preset tiny-cpu: {wall:.0f} s wall ({record['build_cache']} build cache)")
    for name, h in heldout.items():
        print(f"  {name}: pass rate {h['pass_rate']:.3f}, fast_1 {h['fast_1']:.3f}, sampled pass rate {h.get('sampled_pass_rate', 0):.3f}")
    if generate and wait:
        print(f"  per RL step (median): generate {generate:.2f} s, evaluate-wait {wait:.2f} s ({wait / generate:.1f}x)")
    print(f"targets: <= 180 s wall: {'met' if wall <= 180 else 'MISSED'}; evaluate-wait <= 2x generate: "
          f"{'met' if generate and wait and wait <= 2 * generate else 'MISSED'}")
    if not args.no_write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from results_file import write_result

        print("written:", write_result("main_job_tiny_cpu", record))


if __name__ == "__main__":
    main()
