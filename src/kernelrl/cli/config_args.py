"""The config arguments every config-driven command shares (`kernelrl.config_system`): ``--config FILE``,
``--set KEY=VALUE`` (repeatable, dotted paths, YAML values), ``--print-config``, and ``--preset`` where the
command has presets."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")

# `kernelrl.train.config.PRESET_DIR`, found without importing the trainer (`kernelrl --help` stays fast)
TRAIN_PRESET_DIR = Path(__file__).resolve().parents[1] / "train" / "presets"


def train_presets() -> list[str]:
    return sorted(p.stem for p in TRAIN_PRESET_DIR.glob("*.yaml"))


def add_config_arguments(p: argparse.ArgumentParser, config_help: str = "YAML/JSON config file",
                         presets: list[str] | None = None, preset_default: str | None = None) -> None:
    """Add ``--config``, ``--set``, ``--print-config`` (and ``--preset`` when `presets` is given) to `p`."""
    if presets is not None:
        p.add_argument("--preset", default=preset_default, help=f"preset name ({', '.join(presets)})")
    p.add_argument("--config", help=config_help)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="set",
                   help="override a config field (dotted path, YAML value), e.g. eval.timing_trials=3; repeatable")
    p.add_argument("--print-config", action="store_true", help="print the resolved config (YAML) and exit")


def config_error(command: str, exc: Exception) -> int:
    """Report a config that does not load (before any work) and return the exit status 2."""
    print(f"kernelrl {command}: {exc}", file=sys.stderr)
    return 2


def resolve_config(command: str, build: Callable[[], C], print_config: bool,
                   shown: Callable[[C], Any] | None = None) -> tuple[C | None, int | None]:
    """The config `build` makes, and the exit status when the command ends here: 2 when it does not load
    (reported, before any work), 0 after ``--print-config`` printed it (`shown`: what to print instead,
    e.g. with secrets hidden); None: go on with the config."""
    from kernelrl.config_system import ConfigError

    try:
        cfg = build()
    except ConfigError as exc:
        return None, config_error(command, exc)
    if print_config:
        sys.stdout.write((shown(cfg) if shown else cfg).to_yaml())  # type: ignore[attr-defined]
        return cfg, 0
    return cfg, None
