"""Config: presets load and validate, overrides apply, bad values are refused, YAML round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kernelrl.cli import build_parser
from kernelrl.cli.train_cmd import resolve
from kernelrl.config_system import ConfigError
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
    with pytest.raises(ConfigError, match=r"rl\.algo: unknown advantage estimator 'nope'; known: .*gae"):
        load_config("smoke", overrides=["rl.algo=nope"])
    with pytest.raises(ConfigError, match=r"rl\.reward: unknown reward 'nope'"):
        load_config("smoke", overrides=["rl.reward=nope"])
    with pytest.raises(ConfigError):
        load_config("smoke", overrides=["rl.no_such_field=1"])
    with pytest.raises(ValueError):
        load_config("no-such-preset")
    with pytest.raises(ValueError):
        parse_overrides(["rl.steps"])


def test_algo_names_come_from_the_estimator_registry() -> None:
    from kernelrl.rl import ADVANTAGE_ESTIMATORS

    for name in ADVANTAGE_ESTIMATORS:  # every registered estimator, "gae" included, is a valid rl.algo
        assert load_config("smoke", overrides=[f"rl.algo={name}"]).rl.algo == name
    assert "gae" in ADVANTAGE_ESTIMATORS
    args = build_parser().parse_args(["train", "--preset", "smoke", "--algo", "gae"])
    assert resolve(args).rl.algo == "gae"  # type: ignore[attr-defined]


def test_yaml_round_trip(tmp_path: Path) -> None:
    cfg = load_config("smoke", overrides=["rl.rollout=copris", "rl.concurrency=3"])
    path = cfg.save(tmp_path)
    assert load_config(None, path) == cfg


def test_cli_flags_resolve() -> None:
    args = build_parser().parse_args(["train", "--preset", "smoke", "--algo", "trloo", "--rollout", "copris",
                                      "rl.concurrency=4"])
    cfg = resolve(args)
    assert cfg.rl.algo == "trloo" and cfg.rl.turns == 2 and cfg.rl.rollout == "copris"  # type: ignore[attr-defined]


def test_mismatch_specs_single_and_list() -> None:
    # the single-name form keeps working: options are mismatch_options itself
    cfg = load_config("smoke", overrides=["rl.mismatch=token_tis", "rl.mismatch_options={upper: 3.0}"])
    assert cfg.rl.mismatch_specs() == [("token_tis", {"upper": 3.0})]
    assert load_config("qwen2.5-coder-1.5b-grpo").rl.mismatch_specs() == [("token_tis", {"upper": 2.0})]
    # off, also when a preset's options stay behind
    assert load_config("smoke").rl.mismatch_specs() == []
    off = load_config("qwen2.5-coder-1.5b-grpo", overrides=["rl.mismatch=null"])
    assert off.rl.mismatch_specs() == []
    # a list: names (options keyed by name) or {name: ..., **options}
    cfg = load_config("smoke", overrides=["rl.mismatch=[geo_rs, {name: token_veto, threshold: 1.0e-5}]",
                                          "rl.mismatch_options={geo_rs: {lower: 0.99}}", "rl.dual_clip=3"])
    assert cfg.rl.mismatch_specs() == [("geo_rs", {"lower": 0.99}), ("token_veto", {"threshold": 1e-5})]
    assert cfg.rl.dual_clip == 3.0
    assert TrainConfig.model_validate(yaml.safe_load(cfg.to_yaml())).rl.mismatch_specs() == cfg.rl.mismatch_specs()
    with pytest.raises(ConfigError):  # options keyed by a correction that is not listed
        load_config("smoke", overrides=["rl.mismatch=[geo_rs]", "rl.mismatch_options={upper: 2.0}"])
    with pytest.raises(ConfigError):  # a mapping entry without a name
        load_config("smoke", overrides=["rl.mismatch=[{lower: 0.9}]"])
    with pytest.raises(ConfigError):  # dual clip needs c > 1
        load_config("smoke", overrides=["rl.dual_clip=1.0"])
