"""`kernelrl tasks`: list, validate, synthesize and export task suites."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelrl.tasks.synth import SynthConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="work with task suites")
    tasks_sub = p.add_subparsers(dest="tasks_command", metavar="ACTION")
    ls = tasks_sub.add_parser("list", help="list the tasks in a file, directory or JSONL/Parquet dataset")
    ls.add_argument("path")
    ls.add_argument("--json", action="store_true", help="one JSON object per task (without source)")
    _size_options(ls)
    ls.set_defaults(handler=run_list)

    val = tasks_sub.add_parser("validate", help="check tasks run, are deterministic and depend on their input")
    val.add_argument("path")
    val.add_argument("--min-ms", type=float, default=1.0)
    val.add_argument("--max-ms", type=float, default=100.0)
    _size_options(val)
    val.set_defaults(handler=run_validate)

    # flags left out keep `SynthConfig`'s defaults (the one source of them; see `synth_config`)
    syn = tasks_sub.add_parser("synth", help="compose registered ops into new validated tasks",
                               description="Flags left out keep the defaults of kernelrl.tasks.synth.SynthConfig.")
    syn.add_argument("--n", type=int, required=True, help="number of tasks to produce")
    syn.add_argument("--out", required=True, help="output directory (task files plus manifest.jsonl)")
    syn.add_argument("--seed", type=int, help="sampling seed")
    syn.add_argument("--max-ops", type=int, help="ops per composed task, at most")
    syn.add_argument("--compile", action="store_true", default=None,
                     help="also require torch.compile to run and match eager")
    syn.add_argument("--compile-backend", help="torch.compile backend for --compile")
    syn.add_argument("--exclude", action="append", metavar="DIR",
                     help="benchmark directory whose tasks (and near-duplicates) must not be produced; repeatable")
    syn.add_argument("--min-ms", type=float, help="eager runtime window, lower end (1 thread)")
    syn.add_argument("--max-ms", type=float, help="eager runtime window, upper end")
    syn.add_argument("--runtime-basis", choices=("estimated", "measured"),
                     help="window the estimated runtime (reproducible: same seed, same tasks) or a measured one")
    syn.set_defaults(handler=run_synth)

    exp = tasks_sub.add_parser("export", help="write tasks to a JSONL/Parquet dataset with a prompt field")
    exp.add_argument("path", help="task file, directory or dataset")
    exp.add_argument("--out", required=True, help="FILE.jsonl or FILE.parquet")
    _size_options(exp)
    exp.set_defaults(handler=run_export)
    p.set_defaults(handler=lambda args: p.print_help() or 2)


def _size_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", help="apply a size profile from the tasks' metadata (e.g. gpu)")
    parser.add_argument("--size", action="append", default=[], metavar="NAME=N",
                        help="override a size constant in every task that has it (an error if none has it)")
    parser.add_argument("--max-mb", type=float, help="shrink each task's sizes until it fits this many MB")


def _load(args: argparse.Namespace, what: str) -> list:
    """The tasks at `args.path` with the size options applied, with a progress bar; raises TaskError."""
    from tqdm import tqdm

    from kernelrl.tasks import load_tasks

    overrides = {}
    for pair in args.size:
        name, _, value = pair.partition("=")
        if not value.strip().isdigit():
            raise SystemExit(f"--size expects NAME=INTEGER, got {pair!r}")
        overrides[name.strip()] = int(value)
    max_bytes = int(args.max_mb * 2**20) if args.max_mb else None
    with tqdm(desc=what, unit="task", file=sys.stderr, disable=max_bytes is None and not overrides) as bar:
        return load_tasks(args.path, overrides=overrides or None, max_bytes=max_bytes, profile=args.profile,
                          progress=lambda task: bar.update(1))


def run_list(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    from kernelrl.tasks import TaskError
    from kernelrl.tasks.sizing import size_constants

    try:
        tasks = _load(args, "sizing")
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for task in tasks:
            print(json.dumps({k: v for k, v in task.to_dict().items() if k != "source"}))
        return 0
    table = Table(title=f"{len(tasks)} tasks in {args.path}")
    for column in ("id", "level", "dtype", "tags", "sizes"):
        table.add_column(column)
    for task in tasks:
        sizes = ", ".join(f"{k}={v}" for k, (v, _) in size_constants(task.source).items())
        table.add_row(task.id, str(task.level or "-"), task.dtype, ",".join(task.tags), sizes)
    Console().print(table)
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from kernelrl.tasks import TaskError
    from kernelrl.tasks.validate import validate_task

    try:
        tasks = _load(args, "sizing")
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = Table(title=f"validity of {len(tasks)} tasks (eager, 1 thread)")
    for column in ("id", "ms", "result"):
        table.add_column(column)
    failed = 0
    for task in tqdm(tasks, desc="validating", unit="task", file=sys.stderr):
        check = validate_task(task, runtime_ms=(args.min_ms, args.max_ms))
        failed += not check.ok
        verdict = "ok" if check.ok else "; ".join(f"{k}: {v}" for k, v in check.problems.items())
        table.add_row(task.id, f"{check.runtime_ms:.2f}" if check.runtime_ms else "-", verdict)
    Console().print(table)
    print(f"{len(tasks) - failed}/{len(tasks)} valid")
    return 1 if failed else 0


# `tasks synth` flag -> `SynthConfig` field of the same value
SYNTH_FLAGS = ("seed", "max_ops", "compile", "compile_backend", "runtime_basis")


def synth_config(args: argparse.Namespace) -> SynthConfig:
    """The `SynthConfig` of the flags given; the others keep the dataclass's defaults."""
    from pathlib import Path

    from kernelrl.tasks.synth import SynthConfig

    given: dict[str, Any] = {name: getattr(args, name) for name in SYNTH_FLAGS if getattr(args, name) is not None}
    if args.exclude:
        given["exclude"] = [Path(d) for d in args.exclude]
    if args.min_ms is not None or args.max_ms is not None:
        low, high = SynthConfig(n=args.n).runtime_ms
        given["runtime_ms"] = (low if args.min_ms is None else args.min_ms, high if args.max_ms is None else args.max_ms)
    return SynthConfig(n=args.n, **given)


def run_synth(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from kernelrl.tasks.synth import synthesize, write_tasks

    for directory in args.exclude or []:
        if not Path(directory).is_dir():
            print(f"error: --exclude {directory}: not a directory", file=sys.stderr)
            return 2
    config = synth_config(args)
    with tqdm(total=args.n, desc="synthesizing", unit="task", file=sys.stderr) as bar:
        attempts = 0

        def progress(accepted: int) -> None:
            nonlocal attempts
            attempts += 1
            bar.update(accepted)
            bar.set_postfix(attempts=attempts)

        result = synthesize(config, progress)
    manifest = write_tasks(result, args.out)
    table = Table(title=f"rejected {result.attempts - len(result.tasks)} of {result.attempts} candidates")
    table.add_column("filter")
    table.add_column("rejected", justify="right")
    for reason, count in result.rejected.items():
        table.add_row(reason, str(count))
    console = Console(stderr=True)
    console.print(table)
    console.print(
        f"wrote {len(result.tasks)} tasks to {args.out} (manifest {manifest}) in {result.elapsed_s:.1f} s "
        f"({result.rate:.1f} validated tasks/s)"
    )
    return 0 if len(result.tasks) == args.n else 1


def run_export(args: argparse.Namespace) -> int:
    from kernelrl.tasks import TaskError, export_tasks

    try:
        count = export_tasks(_load(args, "sizing"), args.out)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"exported {count} tasks to {args.out}")
    return 0
