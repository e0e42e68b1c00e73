"""`kernelrl tasks`: list the tasks in a file, directory or dataset."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="work with task suites")
    tasks_sub = p.add_subparsers(dest="tasks_command", metavar="ACTION")
    ls = tasks_sub.add_parser("list", help="list the tasks in a file, directory or JSONL/Parquet dataset")
    ls.add_argument("path")
    ls.add_argument("--json", action="store_true", help="one JSON object per task (without source)")
    ls.set_defaults(handler=run_list)
    p.set_defaults(handler=lambda args: p.print_help() or 2)


def run_list(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    from kernelrl.tasks import TaskError, load_tasks
    from kernelrl.tasks.sizing import size_constants

    try:
        tasks = load_tasks(args.path)
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
