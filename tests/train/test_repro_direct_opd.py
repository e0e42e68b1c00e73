"""`kernelrl repro direct-opd` (issue 19) and the distill pieces it adds: `--student-from` really loads the
earlier student, top-K and reverse-KL updates move a real tiny model toward the teacher, config errors
name their field, and the whole repro at smoke size against the real gym."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kernelrl.cli import build_parser, main
from kernelrl.cli.distill_cmd import config as distill_config
from kernelrl.config_system import ConfigError
from kernelrl.evaluate import EvalPool
from kernelrl.repro.direct_opd import ARMS, repro_config, run_direct_opd
from kernelrl.repro.record import missing_keys
from kernelrl.train.config import DistillConfig, TrainConfig, load_config
from kernelrl.train.distill import build_student, kl_to_teacher, opd_step
from kernelrl.train.job import save_weights
from kernelrl.train.model import build_model, clone_model
from kernelrl.train.task_family import make_family


def _perturbed(model: torch.nn.Module, seed: int, scale: float = 0.5) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def test_student_from_loads_the_earlier_students_weights(tmp_path: Path, smoke_cfg: TrainConfig) -> None:
    family = make_family(smoke_cfg.task, smoke_cfg.seed)
    earlier = smoke_cfg.model.model_copy(update={"hidden_size": 48, "num_layers": 2})  # not the run's model
    model, tok = build_model(earlier, family.tokenizer_corpus(), 5)
    _perturbed(model, 0)  # weights no fresh initialisation can give
    run = tmp_path / "first" / "distill"
    run.mkdir(parents=True)
    save_weights(model, run / "student.safetensors")
    (run / "student_model.json").write_text(earlier.model_dump_json())
    args = build_parser().parse_args(["distill", "--preset", "smoke", "--student-from", str(tmp_path / "first")])
    cfg = distill_config(args)  # the CLI flag -> distill.student_from
    assert cfg.distill.student_from == str(tmp_path / "first")
    student, mcfg, info = build_student(cfg, None, tok, family)
    assert (mcfg.hidden_size, mcfg.num_layers) == (48, 2) and info["start"] == "from"
    want, got = model.state_dict(), student.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert all(p.requires_grad for p in student.parameters())
    # a train run's final policy works too; a directory with neither is an error naming the field
    save_weights(model, tmp_path / "policy.safetensors")
    cfg.model = earlier
    cfg.save(tmp_path)
    cfg.distill.student_from = str(tmp_path)
    assert torch.equal(build_student(cfg, None, tok, family)[0].state_dict()["lm_head.weight"],
                       want["lm_head.weight"])
    cfg.distill.student_from = str(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match=r"distill\.student_from"):
        build_student(cfg, None, tok, family)


@pytest.mark.parametrize("objective", ["reverse_kl", "direct_opd"])
def test_topk_update_moves_the_student_toward_the_teacher(smoke_cfg: TrainConfig, objective: str) -> None:
    """Top-K updates (exact over the student's top-K tokens, so fixed tokens suffice): a student that
    starts as pi_Tref moves toward pi_T, the optimum of both objectives (lambda = beta for Direct-OPD)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model: threads only add overhead
    torch.manual_seed(0)
    ref, _ = build_model(smoke_cfg.model, make_family(smoke_cfg.task, 0).tokenizer_corpus(), 0)
    teacher = clone_model(ref)
    _perturbed(teacher, 1, scale=0.2)
    student, anchor = clone_model(ref), clone_model(ref)
    for p in student.parameters():
        p.requires_grad_(True)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(4, 300, (6,), generator=g).tolist() for _ in range(8)]
    resp = [torch.randint(4, 300, (10,), generator=g).tolist() for _ in range(8)]
    d = DistillConfig(objective=objective, token_reward="topk", topk=64)
    opt = torch.optim.AdamW(student.parameters(), lr=1e-2, weight_decay=0.0)
    kl0 = kl_to_teacher(student, teacher, prompts, resp, pad_id=0)
    for _ in range(12):
        m = opd_step(student, teacher, ref, anchor, opt, prompts, resp, d, kl_coef=1.0, pad_id=0)
    torch.set_num_threads(threads)
    assert all(torch.isfinite(torch.tensor(v)) for v in m.values())
    kl = kl_to_teacher(student, teacher, prompts, resp, pad_id=0)
    assert kl < 0.8 * kl0, (kl0, kl)


@pytest.mark.parametrize(("overrides", "field"), [
    (["distill.token_reward=logits"], "distill.token_reward"),
    (["distill.objective=forward_kl"], "distill.objective"),
    (["distill.token_reward=topk", "distill.topk=1000"], "distill.topk"),
    (["distill.token_reward=topk", "distill.kl_mode=k3_loss"], "distill.token_reward"),
    (["distill.student_num_layers=0"], "distill.student_num_layers"),
    (["eval.measure_timing=false", "rl.reward=speedup"], "eval.measure_timing"),
])
def test_config_errors_name_the_field(overrides: list[str], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config("smoke", overrides=overrides)


def test_repro_direct_opd_smoke(tmp_path: Path, pool: EvalPool) -> None:
    res = run_direct_opd(repro_config(smoke=True), tmp_path, seeds=(0,), pool=pool, echo=False)
    for name in ("report.md", "direct-opd.png", "results.json", "seed0/teacher/policy.safetensors",
                 "seed0/student/policy.safetensors", "seed0/sequential_2/distill/student.safetensors"):
        assert (tmp_path / name).is_file(), name
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["repro"] == "direct-opd" and not missing_keys(data)  # revision, config, every seed, wall time
    seed = data["seeds"]["0"]
    assert set(seed["arms"]) == set(ARMS)
    for arm, r in seed["arms"].items():
        assert 0.0 <= r["after"]["pass_rate"] <= 1.0, arm
        assert r["before"]["pass_rate"] == seed["student"]["before"]["pass_rate"], arm  # all start from one student
    assert len(seed["arms"]["direct_opd_topk"]["curve"]["kl_teacher"]) == 2  # distill.steps updates
    assert len(seed["arms"]["rl"]["curve"]["rollout_pass_rate"]) == 2  # step-matched
    # the RL arm starts from the student's weights (model.init_from; its "SFT policy" is the start)
    start, student = (load_file(str(tmp_path / f"seed0/{d}")) for d in ("rl/sft_policy.safetensors",
                                                                         "student/policy.safetensors"))
    assert all(torch.equal(start[k], student[k]) for k in student)
    second = json.loads((tmp_path / "seed0/sequential_2/distill/distill.json").read_text())
    assert second["student"]["student_from"].endswith("sequential_1/distill/student.safetensors")
    assert data["summary"]["direct_opd"]["pass_rate_change_per_seed"] == [
        seed["arms"]["direct_opd"]["after"]["pass_rate"] - seed["student"]["before"]["pass_rate"]]
    report = (tmp_path / "report.md").read_text()
    assert "## What happened" in report and "Direct-OPD vs the baselines" in report and "Sequential composition" in report
    assert res["times"]["total_s"] > 0
    (tmp_path / "report.md").unlink()
    assert main(["repro", "direct-opd", "--out", str(tmp_path), "--report-only"]) == 0
    assert (tmp_path / "report.md").read_text() == report
