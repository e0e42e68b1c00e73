"""One resolution order for every config-driven command, through its real argument parser:
defaults < ``--preset`` < ``--config FILE`` (laid over: only the keys it sets) < ``--set`` / flags."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernelrl.cli import main

SRC = Path(__file__).resolve().parents[2] / "src"


def resolved(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """The config `kernelrl ARGV --print-config` resolves to."""
    assert main([*argv, "--print-config"]) == 0, capsys.readouterr().err
    return yaml.safe_load(capsys.readouterr().out)


def write(tmp_path: Path, text: str, name: str = "partial.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("command", ["train", "distill"])
def test_partial_file_lays_over_the_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    partial = write(tmp_path, "rl: {steps: 7}\nmodel: {hidden_size: 48}\n")
    cfg = resolved(capsys, command, "--preset", "smoke", "--config", partial)
    assert (cfg["rl"]["steps"], cfg["model"]["hidden_size"]) == (7, 48)
    # everything else is still the smoke preset's, nested sections included
    assert (cfg["name"], cfg["rl"]["group_size"], cfg["rl"]["reward"], cfg["model"]["vocab_size"]) == (
        "smoke", 2, "binary", 320)
    # no --preset: the file lays over the default preset, tiny-cpu
    default = resolved(capsys, command, "--config", partial)
    assert (default["name"], default["rl"]["steps"], default["rl"]["group_size"]) == ("tiny-cpu", 7, 8)


def test_json_file_and_lists_replace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partial = write(tmp_path, '{"pipeline": {"stages": ["sft", "rft"]}, "rl": {"lr": 0.5}}', "partial.json")
    base = resolved(capsys, "train", "--preset", "cuda-agent-tiny")
    cfg = resolved(capsys, "train", "--preset", "cuda-agent-tiny", "--config", partial)
    assert len(base["pipeline"]["stages"]) > 2 and cfg["pipeline"]["stages"] == ["sft", "rft"]  # replaced, not merged
    assert cfg["rl"]["lr"] == 0.5 and cfg["rl"]["algo"] == base["rl"]["algo"] == "gae"


def test_set_and_flags_win_over_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partial = write(tmp_path, "rl: {steps: 7, algo: rloo}\nout_dir: from-file\n")
    cfg = resolved(capsys, "train", "--preset", "smoke", "--config", partial, "--set", "rl.steps=9", "rl.lr=0.25",
                   "--out", "from-flag")
    assert (cfg["rl"]["steps"], cfg["rl"]["lr"], cfg["rl"]["algo"], cfg["out_dir"]) == (9, 0.25, "rloo", "from-flag")


def test_proxy_file_over_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partial = write(tmp_path, "arms: [bytes, gzip]\ntrain: {lr: 0.004}\n")
    base = resolved(capsys, "proxy", "run", "--preset", "smoke")
    cfg = resolved(capsys, "proxy", "run", "--preset", "smoke", "--config", partial, "--set", "train.n_evals=3")
    assert cfg["arms"] == ["bytes", "gzip"] and cfg["train"]["lr"] == 0.004 and cfg["train"]["n_evals"] == 3
    assert cfg["train"]["seq_len"] == base["train"]["seq_len"] and cfg["model"] == base["model"]
    assert cfg["preset"] == "smoke"


def test_bench_file_then_set_then_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partial = write(tmp_path, "samples: 2\neval: {timing_trials: 7, correctness_trials: 3}\nepisode: {max_turns: 3}\n")
    cfg = resolved(capsys, "bench", "--config", partial, "--set", "eval.timing_trials=4", "--turns", "5")
    assert (cfg["samples"], cfg["eval"]["timing_trials"], cfg["eval"]["correctness_trials"]) == (2, 4, 3)
    assert cfg["episode"]["max_turns"] == 5 and cfg["eval"]["num_threads"] == 1  # a default the file left alone


@pytest.mark.parametrize(("argv", "text", "key"), [
    (["train", "--preset", "smoke"], "rl: {steps: 2, no_such_knob: 1}\n", "rl.no_such_knob"),
    (["distill"], "distill: {stepz: 3}\n", "distill.stepz"),
    (["proxy", "run", "--preset", "smoke"], "trian: {lr: 0.1}\n", "trian"),
    (["bench"], "eval: {timeouts: {bild: 3}}\n", "eval.timeouts.bild"),
    (["eval"], "timing_trails: 3\n", "timing_trails"),
])
def test_unknown_key_in_the_file_names_key_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    argv: list[str], text: str, key: str) -> None:
    path = write(tmp_path, text)
    assert main([*argv, "--config", path, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"{key}: unknown key in {path}" in err, err


def test_unknown_key_from_set_is_not_blamed_on_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "rl: {steps: 2}\n")
    assert main(["train", "--preset", "smoke", "--config", path, "--set", "rl.stepz=1", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "rl.stepz: unknown key" in err and path not in err


def test_print_config_as_a_process(tmp_path: Path) -> None:
    partial = write(tmp_path, "sft: {steps: 11}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "kernelrl.cli", "train", "--preset", "smoke", "--config", partial,
                           "--set", "sft.lr=0.5", "--print-config"], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert (cfg["name"], cfg["sft"]["steps"], cfg["sft"]["lr"], cfg["sft"]["batch_size"]) == ("smoke", 11, 0.5, 8)
    assert not (tmp_path / "runs").exists()  # printed and exited: no run directory


def test_bench_policy_flags_are_config_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bench's policy flags set the config's `policy` section, so a file and --set reach them too."""
    from kernelrl.cli import build_parser
    from kernelrl.cli.bench_cmd import bench_config, build_policy

    partial = write(tmp_path, "policy: {name: openai, model: from-file, max_tokens: 99, base_url: 'http://h/v1'}\n")
    cfg = resolved(capsys, "bench", "--config", partial, "--model", "from-flag", "--set", "policy.retries=1")
    assert cfg["policy"]["name"] == "openai" and cfg["policy"]["model"] == "from-flag"
    assert (cfg["policy"]["max_tokens"], cfg["policy"]["retries"], cfg["policy"]["temperature"]) == (99, 1, 0.0)
    flags = resolved(capsys, "bench", "--policy", "transformers", "--temperature", "0.7", "--max-batch", "3")
    assert (flags["policy"]["name"], flags["policy"]["temperature"], flags["policy"]["max_batch"]) == (
        "transformers", 0.7, 3)
    args = build_parser().parse_args(["bench", "--config", partial])
    assert build_policy(bench_config(args)).name == "openai:from-file"
    assert main(["bench", "--set", "policy.name=gpt", "--print-config"]) == 2
    assert "policy.name: unknown policy 'gpt'; known: " in capsys.readouterr().err


def test_serve_file_unknown_key_and_trloo_keeps_the_files_turns(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "port: 9002\neval: {timing_trails: 3}\n")
    assert main(["serve", "--config", path, "--print-config"]) == 2
    assert f"eval.timing_trails: unknown key in {path}" in capsys.readouterr().err
    turns = write(tmp_path, "rl: {turns: 3}\n", "turns.yaml")
    assert resolved(capsys, "train", "--preset", "smoke", "--algo", "trloo")["rl"]["turns"] == 2  # implied by trloo
    assert resolved(capsys, "train", "--preset", "smoke", "--config", turns, "--algo", "trloo")["rl"]["turns"] == 3
