"""`kernelrl eval`: evaluate one candidate against one task and print the verdict."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kernelrl.backend_names import BACKEND_NAMES
from kernelrl.cli.config_args import add_config_arguments, resolve_config
from kernelrl.tasks.examples import example_path

if TYPE_CHECKING:
    from kernelrl.evaluate import EvalConfig

DEFAULT_TASK = "scale_bias_relu.py"
DEFAULT_CANDIDATE = "scale_bias_relu_cpu.py"


def parse_sizes(pairs: list[str]) -> dict[str, int]:
    sizes = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise SystemExit(f"--size expects NAME=INTEGER, got {pair!r}")
        sizes[name.strip()] = int(value)
    return sizes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a candidate kernel against a task", description=__doc__)
    p.add_argument("--task", help="task file (KernelBench format); default: the shipped example")
    p.add_argument("--candidate", help="candidate file defining ModelNew; default: the shipped example kernel")
    p.add_argument("--backend", choices=BACKEND_NAMES, default="cpu")
    p.add_argument("--json", action="store_true", help="print the full EvalResult as JSON")
    p.add_argument("--trials", type=int, help="correctness trials (default 5)")
    p.add_argument("--timing-trials", type=int, help="timing trials (default 20)")
    p.add_argument("--no-timing", action="store_true", default=None)
    p.add_argument("--compile-baseline", action="store_true", default=None, help="also time torch.compile(reference)")
    p.add_argument("--threads", type=int, help="CPU threads for the evaluated process (default 1)")
    add_config_arguments(p, "EvalConfig file (YAML/JSON); --set and the flags above override it")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N", help="override a size constant")
    p.add_argument("--scale", type=float, help="scale every size constant of the task by this factor")
    p.add_argument("--max-mb", type=float, help="shrink the task's sizes until it fits this many MB")
    p.set_defaults(handler=run)


def eval_config(args: argparse.Namespace) -> EvalConfig:
    """The gym config: --config, then --set, then the flags given; validated once."""
    from kernelrl.config_system import flatten, layers, merge, validate
    from kernelrl.evaluate import EvalConfig

    flags = {"correctness_trials": args.trials, "timing_trials": args.timing_trials, "num_threads": args.threads,
             "measure_timing": False if args.no_timing else None, "compile_baseline": args.compile_baseline}
    stack = layers(path=args.config, overrides=args.set)
    data = merge(flatten(stack), {k: v for k, v in flags.items() if v is not None})
    return validate(EvalConfig, data, "eval config", stack)


def run(args: argparse.Namespace) -> int:
    from kernelrl.evaluate import Candidate, EvalPool
    from kernelrl.evaluate.render import print_result
    from kernelrl.tasks import TaskError, load_tasks

    config, status = resolve_config("eval", lambda: eval_config(args), args.print_config)
    if status is not None:
        return status
    task_path = args.task or example_path(DEFAULT_TASK)
    candidate_path = args.candidate or (example_path(DEFAULT_CANDIDATE) if not args.task else None)
    if candidate_path is None:
        print("error: --candidate is required with --task", file=sys.stderr)
        return 2
    try:
        tasks = load_tasks(
            task_path,
            overrides=parse_sizes(args.size) or None,
            scale=args.scale,
            max_bytes=int(args.max_mb * 2**20) if args.max_mb else None,
        )
        candidate = Candidate.from_file(candidate_path, backend=args.backend)
    except (TaskError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if len(tasks) != 1:
        print(f"error: {task_path} holds {len(tasks)} tasks; `eval` takes one", file=sys.stderr)
        return 2
    with EvalPool(workers=1, config=config) as pool:
        result = pool.evaluate(tasks[0], candidate)
    if args.json:
        print(result.to_json(indent=2))
    else:
        print_result(result)
    return 0 if result.status in ("ok", "compiled") else 1
