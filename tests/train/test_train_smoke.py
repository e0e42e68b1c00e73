"""End to end on the smoke preset with the real gym: artifacts, metrics, and exact resume."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalPool
from kernelrl.train.config import TrainConfig
from kernelrl.train.job import run_train
from kernelrl.train.logs import read_metrics

COMPARED = ("reward/mean", "rollout/pass_rate", "response_length", "loss", "entropy", "grad_norm", "kept_fraction",
            "approx_kl", "clip_frac", "adv_abs_mean", "lr")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory, smoke_cfg: TrainConfig, pool: EvalPool) -> Path:
    """The run directory of a 4-step smoke run; what it printed is ``../stdout.txt``."""
    cfg = smoke_cfg.model_copy(deep=True)
    cfg.rl.steps = 4
    cfg.sft.rft_rounds, cfg.sft.rft_steps = 1, 2  # rejection fine-tuning warm-up runs too
    run = tmp_path_factory.mktemp("full") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_train(cfg, run_dir=run, pool=pool)
    (run.parent / "stdout.txt").write_text(printed.getvalue())
    return run


def test_opening_lines_name_the_saved_config_not_its_body(full_run: Path) -> None:
    """The run prints where its resolved config is saved, then one line per stage as it starts; never the
    config's YAML (``kernelrl train --print-config`` prints that)."""
    lines = (full_run.parent / "stdout.txt").read_text().splitlines()
    assert lines[0] == f"kernelrl train: run directory {full_run}; resolved config saved to {full_run / 'config.yaml'}"
    started = [line.split("]")[0].removeprefix("[stage ") for line in lines if line.startswith("[stage ")]
    assert started == ["sft", "heldout_sft", "rft", "rl", "heldout_rl"]
    assert len(lines) == 1 + len(started), lines
    body = (full_run / "config.yaml").read_text()
    assert "rl:" in body and not any(line in lines for line in body.splitlines() if line.strip())


def test_artifacts_and_metrics(full_run: Path) -> None:
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "report.md", "curves.png", "sft_loss.png",
                 "sft_policy.safetensors", "policy.safetensors"):
        assert (full_run / name).is_file(), name
    assert any((full_run / "tb").iterdir())
    ckpt = full_run / "checkpoints" / "step_4"
    assert {p.name for p in ckpt.iterdir()} >= {"policy.safetensors", "optim.pt", "state.json"}
    assert json.loads((ckpt / "state.json").read_text())["cursor"] == 4 * 2  # 4 steps x 2 prompt groups
    rft = read_metrics(full_run, "rft")
    assert len(rft) == 1 and rft[0]["sampled"] > 0 and 0 <= rft[0]["kept"] <= rft[0]["sampled"]
    rows = read_metrics(full_run, "rl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for key in ("reward/mean", "rollout/pass_rate", "rollout/fast_1", "rollout/mean_speedup", "entropy",
                "response_length", "clip_frac", "time/generate", "time/evaluate_wait", "time/train", "lr"):
        assert all(key in r and math.isfinite(r[key]) for r in rows), key
    summary = json.loads((full_run / "summary.json").read_text())
    for phase in ("after_sft", "after_rl"):
        assert 0.0 <= summary[phase]["pass_rate"] <= 1.0 and summary[phase]["n"] == 4
    report = (full_run / "report.md").read_text()
    assert "after SFT" in report and "after RL" in report and "fast_1" in report
    # the gym's cost per part, the reference timings included (prefetched ones belong to no evaluation)
    costs = summary["gym_costs"]
    assert costs["evaluations"]["n"] > 0 and costs["build"]["sum_s"] > 0
    assert costs["reference_timings"]["n"] >= 1 and costs["reference_timings"]["sum_s"] > 0
    rows = [line for line in report.splitlines() if line.startswith("| reference timings (once per task")]
    assert len(rows) == 1 and rows[0].count("|") == 6, rows  # part, p50, p95, count, sum


def test_resume_matches_uninterrupted(tmp_path: Path, smoke_cfg: TrainConfig, pool: EvalPool, full_run: Path) -> None:
    cfg = smoke_cfg.model_copy(deep=True)
    cfg.rl.steps = 4
    cfg.sft.rft_rounds, cfg.sft.rft_steps = 1, 2
    run_train(cfg, run_dir=tmp_path, echo=False, pool=pool, stop_after=2)
    assert not (tmp_path / "summary.json").exists()
    summary = run_train(cfg, run_dir=tmp_path, echo=False, pool=pool, resume=True)
    assert summary["resumed_from"].endswith("step_2")
    a, b = read_metrics(full_run, "rl"), read_metrics(tmp_path, "rl")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        for key in COMPARED:
            assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-7), (ra["step"], key)


def test_a_new_run_in_a_used_directory_starts_its_metrics_anew(tmp_path: Path, smoke_cfg: TrainConfig,
                                                               pool: EvalPool) -> None:
    """Without `resume`, a run does not append to the rows an earlier run left in its directory."""
    cfg = smoke_cfg.model_copy(deep=True)
    cfg.rl.steps, cfg.sft.steps = 2, 2
    for _ in range(2):
        run_train(cfg, run_dir=tmp_path, echo=False, pool=pool, report=False)
    assert [r["step"] for r in read_metrics(tmp_path, "rl")] == [1, 2]
    assert len(read_metrics(tmp_path, "sft")) == len({r["step"] for r in read_metrics(tmp_path, "sft")})


def test_copris_resume_carries_partial_rollouts_over(tmp_path: Path, smoke_cfg: TrainConfig, pool: EvalPool) -> None:
    """CoPRIS keeps stopped samples for the next batch; a checkpoint saves them (tokens, log-probs,
    versions, sampler state) and the verdicts of samples waiting for their group, so a resumed run
    still matches the uninterrupted one step by step."""
    cfg = smoke_cfg.model_copy(deep=True)
    cfg.rl.steps, cfg.rl.rollout, cfg.rl.concurrency = 4, "copris", 6  # three groups in flight for two per batch
    cfg.sft.steps = 40  # long enough to learn to stop: samples then finish at different times
    run_train(cfg, run_dir=tmp_path / "full", echo=False, pool=pool)
    run_train(cfg, run_dir=tmp_path / "split", echo=False, pool=pool, stop_after=2)
    state = json.loads((tmp_path / "split" / "checkpoints" / "step_2" / "state.json").read_text())
    queued = state["rollout"]["scheduler"]["queue"]
    assert any(partial is not None and partial["token_ids"] for _, partial in queued), "no partial was carried over"
    run_train(cfg, run_dir=tmp_path / "split", echo=False, pool=pool, resume=True)
    a, b = read_metrics(tmp_path / "full", "rl"), read_metrics(tmp_path / "split", "rl")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert sum(r["rollout/resumed"] for r in a) > 0
    for ra, rb in zip(a, b, strict=True):
        for key in (*COMPARED, "rollout/stale_fraction", "rollout/aborted", "rollout/resumed"):
            assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-7), (ra["step"], key)
