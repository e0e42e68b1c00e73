"""`kernelrl distill`: Direct-OPD, a student trained on its own samples with a teacher pair's dense reward."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kernelrl.cli.config_args import add_config_arguments, resolve_config, train_presets

if TYPE_CHECKING:
    from kernelrl.train.config import TrainConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("distill", help="Direct-OPD distillation from a teacher pair (--preset tiny-cpu)",
                       description=__doc__)
    add_config_arguments(p, "YAML/JSON file laid over the preset (only the keys it sets)", train_presets(), "tiny-cpu")
    p.add_argument("--out", default=None)
    p.add_argument("--student-from", default=None, metavar="RUN",
                   help="start the student from an earlier run's distilled student (or a train run's final policy): "
                        "a second teacher pair then composes its shift on the first")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    p.set_defaults(handler=run)


def config(args: argparse.Namespace) -> TrainConfig:
    """The run's config: the preset, ``--config`` laid over it, the `key=value` overrides, then ``--out`` and
    ``--student-from``."""
    from kernelrl.train.config import load_config

    overrides = list(getattr(args, "set", []) or []) + list(args.overrides)
    overrides += [f"out_dir={args.out}"] if args.out else []
    overrides += [f"distill.student_from={args.student_from}"] if args.student_from else []
    return load_config(args.preset, args.config, overrides)


def run(args: argparse.Namespace) -> int:

    cfg, status = resolve_config("distill", lambda: config(args), args.print_config)
    if status is not None:
        return status
    from kernelrl.train.distill import run_distill

    summary = run_distill(cfg)
    print(summary["verdict"])
    t = summary["times"]
    print(f"Direct-OPD {t['distill_s']:.0f} s, total {t['total_s']:.0f} s; {cfg.out_dir}/distill/distill.json")
    return 0
