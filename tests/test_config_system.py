"""The one config system (`kernelrl.config_system`): train, bench, proxy and serve load the same way, every error
names its dotted field before any work, and configs round-trip through YAML."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernelrl.agent.episode import EpisodeConfig
from kernelrl.bench import BenchConfig
from kernelrl.cli import main
from kernelrl.config_system import ConfigError, load, parse_overrides
from kernelrl.evaluate import EvalConfig
from kernelrl.proxy.config import ProxyConfig, build_config
from kernelrl.serve.server import ServeOptions, load_options
from kernelrl.train.config import POOL_FIELDS, TrainConfig, TrainEvalConfig, load_config
from kernelrl.train.job import eval_config

SRC = Path(__file__).resolve().parents[1] / "src"


def _problems(call: Any) -> str:
    with pytest.raises(ConfigError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize(("call", "expected"), [
    (lambda: load_config("smoke", overrides=["eval.timing_trials=0", "rl.mismatch=[nope]", "eval.histroy=1"]),
     ["eval.timing_trials: must be greater than or equal to 1 (got 0)",
      "rl.mismatch: unknown mismatch correction 'nope'; known: ", "eval.histroy: unknown key"]),
    (lambda: load_config("smoke", overrides=["rl.reward=x", "rl.loss_agg=y", "pipeline.warmup_rl.algo=z"]),
     ["rl.reward: unknown reward 'x'; known: ", "rl.loss_agg: unknown loss aggregation 'y'",
      "pipeline.warmup_rl.algo: unknown advantage estimator 'z'"]),
    (lambda: load_config("smoke", overrides=["rl.reward_options={nope: 1}"]),
     ["rl.reward_options: reward 'binary' takes no option(s) ['nope']"]),
    (lambda: load(BenchConfig, overrides=["episode.histroy=last", "episode.prompt.backend=tpu", "eval.timeouts.init=0"]),
     ["episode.histroy: unknown key", "episode.prompt.backend: must be 'cpu', 'triton', 'cuda' or 'nki' (got 'tpu')",
      "eval.timeouts.init: must be greater than 0"]),
    (lambda: build_config("smoke", overrides=["arms=[bytes, zstd]"]), ["arms: unknown compressor 'zstd'; known: "]),
    (lambda: build_config("smoke", overrides=["train.seq_len=128", "mix.p_compressed=2"]),
     ["mix.p_compressed: must be less than or equal to 1"]),
    (lambda: load_options(overrides=["eval.torch_ops=maybe", "port=-1", "log_level=loud"]),
     ["eval.torch_ops: must be 'reject', 'warn' or 'allow' (got 'maybe')", "port: must be greater than or equal to 0",
      "log_level: must be"]),
])
def test_every_error_names_its_dotted_field(call: Any, expected: list[str]) -> None:
    text = _problems(call)
    assert all(e in text for e in expected), text


def test_loader_layers_and_its_own_errors(tmp_path: Path) -> None:
    path = tmp_path / "bench.yaml"
    path.write_text("samples: 2\nepisode: {max_turns: 3, feedback_mode: json}\n")
    cfg = load(BenchConfig, path=path, overrides=["episode.max_turns=4", "eval.timeouts={build: 9}"])
    assert (cfg.samples, cfg.episode.max_turns, cfg.episode.feedback_mode) == (2, 4, "json")  # overrides win
    assert cfg.eval.timeouts.build == 9 and cfg.eval.timeouts.init == 30  # nested sections merge, not replace
    assert parse_overrides(["a.b=[1, x]", "a.c=null"]) == {"a": {"b": [1, "x"], "c": None}}
    assert "override 'a.b' is not of the form" in _problems(lambda: parse_overrides(["a.b"]))
    assert "invalid config: preset: unknown preset 'huge'; known: cuda-agent-tiny" in _problems(lambda: load_config("huge"))
    path.write_text("- a list\n")
    assert "must hold a mapping" in _problems(lambda: load(BenchConfig, path=path))
    assert "cannot read" in _problems(lambda: load(BenchConfig, path=tmp_path / "missing.yaml"))


def test_direct_construction_and_assignment_are_checked_too() -> None:
    assert "timing_trials: must be greater than or equal to 1" in _problems(lambda: EvalConfig(timing_trials=0))
    cfg = load_config("smoke")
    with pytest.raises(ConfigError, match=r"warmup: must be greater than or equal to 0"):
        cfg.eval.warmup = -1
    episode = EpisodeConfig(tools=True)
    assert episode.prompt.tools
    episode.tools = False
    assert not episode.prompt.tools  # the prompt follows the episode's tools setting
    assert EvalConfig().replace(measure_timing=False).measure_timing is False


def test_train_eval_section_is_the_gym_config() -> None:
    assert issubclass(TrainEvalConfig, EvalConfig)
    gym_only = set(EvalConfig.model_fields)
    assert set(TrainEvalConfig.model_fields) - gym_only == set(POOL_FIELDS)  # nothing else of train's own
    cfg = load_config("smoke", overrides=["eval.rtol=0.01", "eval.timeouts.build=5", "eval.static_severity={'*': warn}",
                                          "eval.memory_limit_mb=1024", "eval.workers=3"])
    gym = eval_config(cfg)
    assert type(gym) is EvalConfig and (gym.rtol, gym.timeouts.build, gym.memory_limit_mb) == (0.01, 5, 1024)
    assert gym.static_severity == {"*": "warn"} and gym.timing_trials == 2 and gym.torch_ops == "reject"
    assert eval_config(load_config("smoke", overrides=["task.hybrid=true"])).torch_ops == "allow"


@pytest.mark.parametrize(("cls", "build"), [
    (TrainConfig, lambda: load_config("smoke", overrides=["rl.mismatch=[geo_rs]", "eval.rtol=0.5", "rl.accuracy_filter=[0.1, 0.9]"])),
    (BenchConfig, lambda: load(BenchConfig, overrides=["samples=3", "episode.prompt.backend=nki", "eval.timeouts.build=7"])),
    (ProxyConfig, lambda: build_config("smoke", overrides=["train.lr=0.01"])),
    (ServeOptions, lambda: load_options(overrides=["port=9000", "eval.static_severity={x: warn}"])),
])
def test_yaml_round_trip(tmp_path: Path, cls: type, build: Any) -> None:
    cfg = build()
    path = tmp_path / "config.yaml"
    path.write_text(cfg.to_yaml())
    assert load(cls, path=path) == cfg


def test_cli_print_config_applies_set_and_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--set", "samples=3", "--set", "eval.timing_trials=4", "--turns", "2", "--print-config"]) == 0
    bench = BenchConfig.from_dict(yaml.safe_load(capsys.readouterr().out))
    assert (bench.samples, bench.eval.timing_trials, bench.episode.max_turns) == (3, 4, 2)
    # serve: the earlier --config form (EvalConfig fields alone) is the eval section
    assert main(["serve", "--config", '{"timing_trials": 3}', "--port", "9001", "--print-config"]) == 0
    serve = ServeOptions.from_dict(yaml.safe_load(capsys.readouterr().out))
    assert serve.eval.timing_trials == 3 and serve.port == 9001
    assert main(["distill", "--preset", "smoke", "--set", "distill.topk=0"]) == 2
    assert "distill.topk: must be greater than or equal to 1" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["bench", "--suite", "{tmp}", "--out", "{out}", "--set", "episode.histroy=all"], "episode.histroy: unknown key"),
    (["bench", "--suite", "{tmp}", "--out", "{out}", "--policy", "gpt"], "policy.name: unknown policy 'gpt'; known: "),
    (["proxy", "run", "--preset", "smoke", "--out", "{out}", "--set", "train.lr=-1"], "train.lr: must be greater than 0"),
    (["serve", "--db", "{out}/s.sqlite", "--set", "eval.timing_trials=0"],
     "eval.timing_trials: must be greater than or equal to 1"),
    (["train", "--preset", "smoke", "--out", "{out}", "--set", "rl.reward=nope"], "rl.reward: unknown reward 'nope'"),
    (["eval", "--set", "timeouts.build=0", "--trials", "0"], "timeouts.build: must be greater than 0 (got 0)"),
])
def test_cli_bad_override_exits_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                                message: str) -> None:
    out = tmp_path / "out"
    assert main([a.format(tmp=tmp_path, out=out) for a in argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()  # no run directory, no job store: nothing started


def test_cli_process_exits_2_naming_the_field(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "kernelrl.cli", "train", "--preset", "smoke", "--out", "run",
                           "eval.timing_trials=0", "rl.reward=nope"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "eval.timing_trials: must be greater than or equal to 1 (got 0)" in proc.stderr
    assert "rl.reward: unknown reward 'nope'" in proc.stderr and not (tmp_path / "run").exists()
