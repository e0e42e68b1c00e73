"""`kernelrl repro drkernel` (issue 16): the self-inclusion weights and test-time scaling summaries on
hand-made data, and the whole repro at smoke size against the real gym (hybrid mode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernelrl.cli import main
from kernelrl.evaluate.result import EvalResult, Status, Timing
from kernelrl.repro.drkernel import (
    repro_config,
    run_drkernel,
    self_inclusion_weights,
    sequential_scaling,
)
from kernelrl.repro.record import load_config, missing_keys
from kernelrl.train.rollout import Sample


def test_self_inclusion_weights_match_n_minus_one_over_n() -> None:
    # one prompt: 4 episodes at turn 0, 2 of them reach turn 1, 1 reaches turn 2
    episode = torch.tensor([0, 1, 2, 3, 0, 1, 0])
    turn = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    rewards = torch.tensor([0.0, 1.0, 0.5, 2.0, 1.5, 0.0, 3.0], dtype=torch.float64)
    w = self_inclusion_weights(rewards, torch.zeros(7, dtype=torch.long), episode, turn)
    per = w["per_turn"]
    assert [per[t]["analytic_grpo"] for t in (0, 1, 2)] == pytest.approx([0.75, 0.5, 0.0])
    assert [per[t]["drgrpo"] for t in (0, 1, 2)] == pytest.approx([0.75, 0.5, 0.0])
    assert [per[t]["trloo"] for t in (0, 1, 2)] == pytest.approx([1.0, 1.0, 1.0])
    assert per[0]["ratio_drgrpo_to_trloo"] == pytest.approx(0.75)  # A_grpo = (n-1)/n * A_trloo
    assert per[1]["ratio_drgrpo_to_trloo"] == pytest.approx(0.5)
    assert per[2]["singleton_share"] == 1.0 and per[2]["ratio_drgrpo_to_trloo"] is None
    assert w["all"]["analytic_grpo"] == pytest.approx((4 * 0.75 + 2 * 0.5) / 7)


def _s(group: int, episode: int, turn: int, ok: bool, speedup: float) -> Sample:
    r = EvalResult(Status.OK if ok else Status.INCORRECT, "t", "cpu", timing=Timing(speedup=speedup))
    return Sample(group, episode, turn, "c", [], [], [], [], "", "stop", result=r)


def test_sequential_scaling_best_vs_last() -> None:
    samples = [_s(0, 0, 0, True, 1.5), _s(0, 0, 1, False, 0.0),  # fast then broken: best counts, last does not
               _s(0, 1, 0, False, 0.0), _s(0, 1, 1, True, 2.0),  # fixed at turn 1
               _s(1, 2, 0, True, 0.8), _s(1, 2, 1, True, 0.9)]  # correct, never faster
    d = sequential_scaling(samples, 2)
    assert d["episodes"] == 3 and d["last_fast_1"] == pytest.approx(1 / 3) and d["best_fast_1"] == pytest.approx(2 / 3)
    assert d["per_budget"][0]["best_fast_1"] == pytest.approx(1 / 3)
    assert d["per_budget"][1]["last_pass"] == pytest.approx(2 / 3)


def test_cli_repro_print_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["repro", "drkernel", "rl.steps=1", "--smoke", "--print-config", "--set", "rl.lr=0.01"]) == 0
    out = capsys.readouterr().out
    assert "hybrid: true" in out and "steps: 1" in out and "stop_at_first_correct: false" in out and "lr: 0.01" in out
    # GRPO vs TRLOO is judged on the sampled held-out pass rate: a config without samples is refused up front
    assert main(["repro", "drkernel", "--smoke", "--set", "eval.heldout_samples=1"]) == 2
    assert "eval.heldout_samples must be >= 2" in capsys.readouterr().err
    assert main(["repro", "drkernel", "--smoke", "--lazy-seeds", "-1", "--out", str(tmp_path)]) == 2
    assert "--lazy-seeds must be >= 0" in capsys.readouterr().err
    cfg = repro_config()
    assert cfg.task.hybrid and cfg.rl.algo == "trloo" and cfg.rl.turns >= 2


def test_repro_smoke_run(tmp_path: Path) -> None:
    """Both arms of GRPO vs TRLOO from one SFT checkpoint, (a)-(c), results.json and a report rendered from it."""
    res = run_drkernel(repro_config(smoke=True), tmp_path, seeds=(0,), echo=False, probe_batches=1,
                       heldout_episodes=1, heldout_turns=2)
    for name in ("report.md", "drkernel.png", "results.json", "seed0/trloo/metrics.jsonl",
                 "seed0/grpo/policy.safetensors", "seed0/pr_prs/policy.safetensors", "seed0/sft/sft_policy.safetensors"):
        assert (tmp_path / name).is_file(), name
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["repro"] == "drkernel" and not missing_keys(data) and data["wall_s"] > 0
    assert load_config("drkernel", data["config"]).rl.steps == 2  # the recorded config loads with today's schema
    seed = data["seeds"]["0"]["arms"]
    for arm in ("grpo", "trloo"):
        assert len(seed[arm]["reward_mean"]) == 2 and 0.0 <= seed[arm]["heldout_after_rl"][data["metric"]] <= 1.0
    for arm in ("grpo", "trloo"):  # each arm ran its own estimator, from the seed's one SFT checkpoint
        ran = json.loads((tmp_path / "seed0" / arm / "summary.json").read_text())["config"]
        assert ran["rl"]["algo"] == arm and ran["sft"]["steps"] == 0
        assert ran["model"]["init_from"] == str(tmp_path / "seed0" / "sft" / "sft_policy.safetensors")
    assert seed["grpo"]["heldout_after_sft"] == seed["trloo"]["heldout_after_sft"]
    cmp = data["algo_comparison"]
    assert cmp["n"] == 1 and cmp["verdict"] == "underpowered" and cmp["ci95"] is None  # one seed: no interval
    assert cmp["diffs"] == [pytest.approx(seed["trloo"]["heldout_after_rl"][data["metric"]]
                                          - seed["grpo"]["heldout_after_rl"][data["metric"]])]
    for arm in ("baseline", "pr_prs"):
        assert len(data["lazy"][arm]["lazy_share"]) == 2  # one value per RL step
        probe = data["self_inclusion"][arm]["to_turn_limit"]["all"]
        assert probe["trloo"] == pytest.approx(1.0) and probe["drgrpo"] == pytest.approx(probe["analytic_grpo"])
        tt = data["test_time"][arm]
        assert 0.0 <= tt["last_fast_1"] <= tt["best_fast_1"] <= 1.0 and tt["episodes"] == 2  # 2 held-out x 1
    # The lazy baseline is its own arm at PR's reward scale, less the profiling term; PR + PRS adds it and PRS.
    for arm, (weight, prs) in {"baseline": ({"coverage_weight": 0.0}, "off"), "pr_prs": ({}, "per_turn")}.items():
        ran = json.loads((tmp_path / "seed0" / arm / "summary.json").read_text())["config"]["rl"]
        assert (ran["reward"], ran["reward_options"], ran["prs"], ran["steps"]) == ("coverage", weight, prs, 2)
    per_seed_tt = data["seeds"]["0"]["test_time"]  # (c) on every seed's TRLOO policy, paired by seed
    assert per_seed_tt["episodes"] == 2 and len(per_seed_tt["per_budget"]) == 2  # 2 held-out chains x 1, 2 turns
    refine = data["refinement_comparison"]
    assert refine["arm"] == "trloo" and refine["n"] == 1 and refine["diffs"] == [pytest.approx(
        per_seed_tt["per_budget"][-1]["last_fast_1"] - per_seed_tt["per_budget"][0]["last_fast_1"])]
    lazy = data["lazy_comparison"]
    assert data["lazy_seeds"] == [0] and lazy["n"] == len(lazy["diffs"]) <= 1 and set(lazy["per_seed"]) == {"0"}
    report = (tmp_path / "report.md").read_text()
    assert "GRPO vs TRLOO (the finding under test)" in report and "**Verdict (TRLOO beats GRPO" in report
    assert "underpowered" in report and "(b) Demonstration, not a finding" in report
    assert "(a) Lazy optimisation" in report and "(c) Sequential" in report
    assert "**Verdict (feedback turns (fix: and faster:) improve the answer" in report
    assert res["times"]["total_s"] > 0
    (tmp_path / "report.md").unlink()
    assert main(["repro", "drkernel", "--out", str(tmp_path), "--report-only"]) == 0
    assert (tmp_path / "report.md").read_text() == report
