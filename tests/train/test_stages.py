"""`kernelrl train --preset cuda-agent-tiny` (CUDA Agent's stages) at a seconds-sized override, and the
validated stage list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kernelrl.cli import main
from kernelrl.config_system import ConfigError
from kernelrl.evaluate import EvalPool
from kernelrl.train.config import STAGE_NAMES, load_config
from kernelrl.train.job import run_train
from kernelrl.train.logs import read_metrics

#: the preset at test size: the smoke model and gym settings, one step or so per stage
SECONDS = [
    "model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.vocab_size=320", "model.max_positions=160",
    "task.n_train=8", "task.n_heldout=2", "task.min_ops=2", "task.max_ops=2", "task.rows=64", "task.cols=256",
    "sft.steps=10", "sft.batch_size=8", "pipeline.warmup_rl.steps=1", "pipeline.rft.prompts=2", "pipeline.rft.episodes=2",
    "pipeline.rft.batch_size=4", "pipeline.critic.steps=1", "pipeline.critic.epochs=1",
    "rl.steps=1", "rl.prompts_per_step=1", "rl.group_size=2", "rl.max_new_tokens=16", "rl.micro_batch_size=4",
    "eval.workers=1", "eval.correctness_trials=1", "eval.timing_trials=2", "eval.timing_budget_s=0.1",
    "eval.heldout_samples=1", "eval.sandbox=none", "progress=false", "tensorboard=false", "threads=1",
]


def test_preset_runs_every_stage_and_resumes_after_a_stage(tmp_path: Path, pool: EvalPool) -> None:
    """The preset interrupted after three stages (sft, warm-up, RFT) and resumed: the resumed run starts from
    the saved policy, runs only critic and PPO, and reports all five stages."""
    cfg = load_config("cuda-agent-tiny", overrides=SECONDS)
    assert cfg.pipeline.stages == list(STAGE_NAMES) and cfg.rl.algo == "gae" and cfg.rl.turns == 2
    part = run_train(cfg, run_dir=tmp_path, echo=False, pool=pool, stop_after=3)
    assert list(part["stages"]) == ["sft", "warmup_rl", "rft"] and not (tmp_path / "summary.json").exists()
    saved_policy = load_file(str(tmp_path / "stages" / "2_rft" / "policy.safetensors"))
    with pytest.raises(ValueError, match="other model settings"):
        run_train(load_config("cuda-agent-tiny", overrides=[*SECONDS, "model.hidden_size=64"]), run_dir=tmp_path,
                  echo=False, pool=pool, resume=True)
    sft_rows = len(read_metrics(tmp_path, "sft"))
    summary = run_train(cfg, run_dir=tmp_path, echo=False, pool=pool, resume=True)
    assert summary["resumed_from"].endswith("2_rft") and len(read_metrics(tmp_path, "sft")) == sft_rows
    assert summary["stages"]["rft"] == json.loads(json.dumps(part["stages"]["rft"], default=str))
    assert sorted(p.name for p in (tmp_path / "stages").iterdir()) == [f"{i}_{n}" for i, n in enumerate(STAGE_NAMES)]
    critic_start = load_file(str(tmp_path / "stages" / "3_critic" / "policy.safetensors"))
    assert all(torch.equal(critic_start[k], v) for k, v in saved_policy.items())  # resumed from RFT's weights
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert list(saved["stages"]) == list(STAGE_NAMES)
    for name, d in saved["stages"].items():
        assert 0.0 <= d["heldout"]["pass_rate"] <= 1.0 and 0.0 <= d["heldout"]["fast_1"] <= 1.0, name
        assert d["heldout"]["n"] == 2 and saved["times"][f"{name}_s"] >= 0
    assert saved["stages"]["critic"]["actor_unchanged"] is True
    assert saved["stages"]["rft"]["episodes"] == 4  # 2 prompts x 2 episodes, kept or not
    assert summary["after_rl"] == summary["stages"]["ppo"]["heldout"]
    phases = {r["phase"] for r in read_metrics(tmp_path)}
    assert {"sft", "warmup_rl", "rft_data", "critic", "rl", "heldout"} <= phases
    assert "critic/value_loss" in read_metrics(tmp_path, "rl")[0]
    report = (tmp_path / "report.md").read_text()
    assert "Held-out after each stage" in report and all(f"| {n} |" in report for n in STAGE_NAMES)
    assert (tmp_path / "policy.safetensors").is_file() and (tmp_path / "sft_policy.safetensors").is_file()


def test_bad_stage_list_fails_at_load_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"pipeline\.stages: unknown stage\(s\) \['bogus'\]; known: sft"):
        load_config("cuda-agent-tiny", overrides=["pipeline.stages=[sft,bogus]"])
    with pytest.raises(ConfigError, match=r"pipeline\.stages: \['rft'\] listed more than once"):
        load_config("cuda-agent-tiny", overrides=["pipeline.stages=[rft,rft]"])
    with pytest.raises(ConfigError, match=r"pipeline\.stages: has 'critic' but rl\.algo is 'grpo'"):
        load_config("cuda-agent-tiny", overrides=["rl.algo=grpo"])
    with pytest.raises(ConfigError, match=r"pipeline\.warmup_rl\.algo: unknown advantage estimator"):
        load_config("cuda-agent-tiny", overrides=["pipeline.warmup_rl.algo=nope"])
    with pytest.raises(ConfigError, match=r"rl\.critic_lr"):
        load_config("cuda-agent-tiny", overrides=["rl.critic_lr=0"])
    out = tmp_path / "run"  # the CLI refuses before any work: no run directory
    assert main(["train", "--preset", "cuda-agent-tiny", "--out", str(out), "pipeline.stages=[warmup,ppo]"]) == 2
    assert "pipeline.stages: unknown stage(s) ['warmup']" in capsys.readouterr().err
    assert not out.exists()
