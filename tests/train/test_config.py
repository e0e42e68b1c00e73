"""Config: presets load and validate, overrides apply, bad values are refused, YAML round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from kernelrl.cli import build_parser
from kernelrl.cli.train_cmd import resolve
from kernelrl.train.config import TrainConfig, load_config, parse_overrides, preset_names


def test_presets_load() -> None:
    names = preset_names()
    assert {"tiny-cpu", "smoke"} <= set(names)
    for name in names:
        cfg = load_config(name)
        assert isinstance(cfg, TrainConfig)
    assert load_config("tiny-cpu").rl.algo == "grpo"


def test_overrides_and_validation() -> None:
    assert parse_overrides(["rl.steps=3", "rl.mismatch=token_tis", "seed=5"]) == {
        "rl": {"steps": 3, "mismatch": "token_tis"}, "seed": 5}
    cfg = load_config("smoke", overrides=["rl.algo=rloo", "rl.lr=0.5"])
    assert cfg.rl.algo == "rloo" and cfg.rl.lr == 0.5 and cfg.rl.group_size == 2
    with pytest.raises(ValidationError):
        load_config("smoke", overrides=["rl.algo=nope"])
    with pytest.raises(ValidationError):
        load_config("smoke", overrides=["rl.no_such_field=1"])
    with pytest.raises(ValueError):
        load_config("no-such-preset")
    with pytest.raises(ValueError):
        parse_overrides(["rl.steps"])


def test_yaml_round_trip(tmp_path: Path) -> None:
    cfg = load_config("smoke", overrides=["rl.rollout=copris", "rl.concurrency=3"])
    path = cfg.save(tmp_path)
    assert load_config(None, path) == cfg


def test_cli_flags_resolve() -> None:
    args = build_parser().parse_args(["train", "--preset", "smoke", "--algo", "trloo", "--rollout", "copris",
                                      "rl.concurrency=4"])
    cfg = resolve(args)
    assert cfg.rl.algo == "trloo" and cfg.rl.turns == 2 and cfg.rl.rollout == "copris"  # type: ignore[attr-defined]
