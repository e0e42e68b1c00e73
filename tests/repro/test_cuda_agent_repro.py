"""`kernelrl repro cuda-agent --smoke` end to end with a real tiny model and the real gym: the full recipe per seed,
the ablation branched from that seed's own warm-up checkpoint (and only from it), the record and its report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelrl.cli import main
from kernelrl.repro.cuda_agent import ABLATION, COMPARISONS, branch, repro_config
from kernelrl.repro.record import config_problems, missing_keys, render_report
from kernelrl.train.logs import read_metrics


def test_repro_cuda_agent_smoke_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["repro", "cuda-agent", "--smoke", "--seeds", "0,1", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert not missing_keys(data) and data["seed_list"] == [0, 1] and not config_problems("cuda-agent", data["config"])
    assert (tmp_path / "report.md").read_text() == render_report("cuda-agent", data)
    assert (tmp_path / "cuda-agent.png").stat().st_size > 0
    assert all(data["comparisons"][name]["n"] == 2 for name in COMPARISONS)
    assert "full_vs_ablation: " in capsys.readouterr().out

    full, ablation = tmp_path / "seed0" / "full", tmp_path / "seed0" / "no_rft_no_critic"
    summary = json.loads((ablation / "summary.json").read_text())
    # The ablation resumed from the full run's checkpoint after the warm-up, then ran PPO alone.
    assert summary["resumed_from"].endswith("1_warmup_rl") and list(summary["stages"]) == ABLATION
    assert summary["stages"]["warmup_rl"] == json.loads((full / "summary.json").read_text())["stages"]["warmup_rl"]
    phases = {row["phase"] for row in read_metrics(ablation)}
    assert "rl" in phases and not phases & {"rft", "critic", "sft", "warmup_rl"}
    assert {"sft", "warmup_rl", "critic", "rl"} <= {row["phase"] for row in read_metrics(full)}

    # A second run into the same directory would mix its seed directories and results with these (seed1 would stay
    # beside a one-seed run): it is refused before anything runs, and --overwrite clears the old run.
    rows = len(read_metrics(full))
    assert main(["repro", "cuda-agent", "--smoke", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "holds an earlier run (results.json, seed0, seed1)" in capsys.readouterr().err
    assert len(read_metrics(full)) == rows
    assert main(["repro", "cuda-agent", "--smoke", "--seeds", "0", "--out", str(tmp_path), "--overwrite"]) == 0
    assert len(read_metrics(full)) == rows and not (tmp_path / "seed1").exists()


def test_a_branch_drops_the_later_stages_of_an_earlier_run(tmp_path: Path) -> None:
    """Branching into a directory that holds a previous ablation's later stages: those are removed, so resuming
    continues from the warm-up checkpoint, not from the old run's PPO."""
    cfg = repro_config(smoke=True)
    warm = tmp_path / "full" / "stages" / "1_warmup_rl"
    warm.mkdir(parents=True)
    (warm / "state.json").write_text(json.dumps({"stage": 1, "config": {}}))
    old = tmp_path / "arm" / "stages" / "2_ppo"
    old.mkdir(parents=True)
    (old / "state.json").write_text("{}")
    arm = cfg.model_copy(deep=True)
    arm.pipeline.stages = list(ABLATION)
    branch(tmp_path / "full", arm, tmp_path / "arm")
    assert sorted(p.name for p in (tmp_path / "arm" / "stages").iterdir()) == ["1_warmup_rl"]
    stamped = json.loads((tmp_path / "arm" / "stages" / "1_warmup_rl" / "state.json").read_text())["config"]
    assert stamped["pipeline"]["stages"] == ABLATION and stamped["seed"] == cfg.seed
    with pytest.raises(FileNotFoundError, match="no checkpoint after warmup_rl"):
        branch(tmp_path / "nowhere", arm, tmp_path / "arm2")
