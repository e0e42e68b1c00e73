"""Issue 15's acceptance on a real KernelBench checkout: how many tasks of levels 1-3 load shrunk to a memory
budget, whether every loaded task runs one forward afterwards, and whether any task had its channel/feature
counts shrunk although shrinking its batch-like sizes alone would have fitted.

Targets: >= 95% of level 1 and 2 tasks load, >= 85% of level 3; every loaded task runs; no needless
channel/feature shrinking. The checkout's files are read, never copied: the results name the files only.

    python bench/bench_kernelbench_load.py PATH/TO/KernelBench [--max-mb 64] [--levels 1 2 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from kernelrl.tasks.loaders import TaskLoadError, failure_kind, load_tasks
from kernelrl.tasks.sizing import (
    estimate_bytes,
    run_once,
    scalable,
    size_constants,
    size_tiers,
    with_overrides,
)
from kernelrl.tasks.task import Task

TARGETS = {1: 0.95, 2: 0.95, 3: 0.85}


def level_dir(root: Path, level: int) -> Path:
    """`root/levelN`, or `root/KernelBench/levelN` for a checkout of the whole repository."""
    for candidate in (root / f"level{level}", root / "KernelBench" / f"level{level}"):
        if candidate.is_dir():
            return candidate
    raise SystemExit(f"{root}: no level{level}/ directory (nor KernelBench/level{level}/)")


def batch_alone_fits(task: Task, max_bytes: int) -> bool:
    """Would shrinking only the batch-like sizes (to the shrinker's floor of 2) have fitted the budget?"""
    original = with_overrides(task, {n: old for n, (old, _) in task.size_overrides.items()})
    tiers = size_tiers(original.source)
    batch = {n: min(v, 2) for n, (v, _) in size_constants(original.source).items()
             if tiers[n] == 0 and scalable(n, v)}
    return estimate_bytes(with_overrides(original, batch).source) <= max_bytes


def measure_level(directory: Path, max_bytes: int) -> dict[str, Any]:
    """Load one level shrunk to `max_bytes`, then run every loaded task and check its channel counts."""
    files = sorted(p.name for p in directory.glob("*.py") if not p.name.startswith(("_", ".")))
    start = time.perf_counter()
    try:
        tasks, failures = load_tasks(directory, max_bytes=max_bytes), []
    except TaskLoadError as exc:
        tasks, failures = exc.loaded, exc.failures
    load_s = time.perf_counter() - start
    run_failures, channel_changes, needless = [], [], []
    for task in tasks:
        try:
            run_once(task.source)
        except Exception as exc:  # a loaded task that does not run is what this bench looks for
            run_failures.append({"task": task.id, "reason": f"{type(exc).__name__}: {exc}"[:300]})
        tiers = size_tiers(task.source)  # by name, and what the model is built from (get_init_inputs)
        changed = {n: list(v) for n, v in task.size_overrides.items() if tiers.get(n) == 2}
        if changed:
            channel_changes.append({"task": task.id, "changed": changed})
            if batch_alone_fits(task, max_bytes):
                needless.append(task.id)
    total = len(tasks) + len(failures)
    return {
        "files": files, "total": total, "loaded": len(tasks), "failed": len(failures),
        "load_rate": round(len(tasks) / total, 4) if total else 0.0, "load_seconds": round(load_s, 1),
        "failures": [{"task": t, "kind": failure_kind(m), "reason": m[:400]} for t, m in failures],
        "shrunk": {t.id: {n: list(v) for n, v in t.size_overrides.items()} for t in tasks if t.size_overrides},
        "run_failures": run_failures, "channel_changes": channel_changes, "needless_channel_shrinks": needless,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help="KernelBench checkout (holding level1/.. or KernelBench/level1/..)")
    parser.add_argument("--max-mb", type=float, default=64.0)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_kernelbench_load.json")
    args = parser.parse_args()
    max_bytes = int(args.max_mb * 2**20)
    levels = {f"level{n}": measure_level(level_dir(args.checkout, n), max_bytes) for n in args.levels}
    print(f"{'level':<8}{'tasks':>6}{'loaded':>8}{'rate':>8}{'target':>8}{'run fail':>10}{'ch. shrunk':>12}{'needless':>10}")
    passed = True
    for name, r in levels.items():
        target = TARGETS.get(int(name[5:]), 1.0)
        ok = r["load_rate"] >= target and not r["run_failures"] and not r["needless_channel_shrinks"]
        passed &= ok
        print(f"{name:<8}{r['total']:>6}{r['loaded']:>8}{r['load_rate']:>8.1%}{target:>8.0%}{len(r['run_failures']):>10}"
              f"{len(r['channel_changes']):>12}{len(r['needless_channel_shrinks']):>10}  {'ok' if ok else 'MISSED'}")
        for f in r["failures"]:
            print(f"    failed {f['task']}: {f['reason'][:160]}")
        for f in r["run_failures"]:
            print(f"    loaded but does not run {f['task']}: {f['reason'][:160]}")
    if not args.no_write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from results_file import write_result

        print("written:", write_result("bench_kernelbench_load", {
            "max_mb": args.max_mb, "targets": {f"level{k}": v for k, v in TARGETS.items()},
            "all_targets_met": passed, "levels": levels,
        }))


if __name__ == "__main__":
    main()
