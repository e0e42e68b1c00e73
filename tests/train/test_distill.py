"""Direct-OPD on the smoke preset: a teacher pair from a short RL run scores a wider student's samples."""

from __future__ import annotations

import json
import math
from pathlib import Path

from kernelrl.evaluate import EvalPool
from kernelrl.train.config import TrainConfig
from kernelrl.train.logs import read_metrics


def test_distill_smoke(tmp_path: Path, smoke_cfg: TrainConfig, pool: EvalPool) -> None:
    from kernelrl.train.distill import run_distill

    cfg = smoke_cfg.model_copy(deep=True)
    cfg.out_dir = str(tmp_path)
    cfg.sft.steps = 20
    cfg.rl.reward = "milestone"
    cfg.rl.entropy_coef = 0.01  # the teacher moves in its 2 RL steps even when a group's rewards tie
    cfg.distill = cfg.distill.model_copy(update={"teacher_rl_steps": 2, "student_hidden_size": 48,
                                                  "student_sft_steps": 10, "steps": 3, "prompts_per_step": 2,
                                                  "samples_per_prompt": 2})
    summary = run_distill(cfg, pool=pool)
    run = tmp_path / "distill"
    assert (run / "student.safetensors").is_file() and (run / "distill.json").is_file()
    saved = json.loads((run / "distill.json").read_text())
    assert saved["verdict"] == summary["verdict"] and "->" in summary["verdict"]
    for k in ("before", "after"):
        assert 0.0 <= summary[k]["pass_rate"] <= 1.0
    rows = read_metrics(run, "distill")
    assert len(rows) == 3
    assert all(math.isfinite(r["opd_reward"]) and math.isfinite(r["loss"]) for r in rows)
    # the teacher moved during its RL, so the pair disagrees on the student's tokens
    assert any(abs(r["opd_reward"]) > 0 for r in rows)
    assert (tmp_path / "distill" / "teacher" / "policy.safetensors").is_file()
