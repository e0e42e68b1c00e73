"""Direct-OPD: the mechanism on a real tiny model (student pulled to the teacher), and the smoke run."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelrl.evaluate import EvalPool
from kernelrl.generation import Engine
from kernelrl.train.config import DistillConfig, TrainConfig
from kernelrl.train.elementwise_chains import OPS, prompt_text, split_chains, tokenizer_corpus
from kernelrl.train.job import sft_pairs
from kernelrl.train.logs import read_metrics
from kernelrl.train.model import build_model, clone_model, encode_answer, encode_prompt
from kernelrl.train.sft import sft_train


def _last_forms(chain: tuple[str, ...]) -> str:
    return " " + " ".join(OPS[w].c_forms[-1] for w in chain)


@pytest.fixture(scope="module")
def pair(smoke_cfg: TrainConfig) -> Iterator[tuple[Any, Any, Any, list, list]]:
    """(teacher_ref, teacher, tok, train, held): teacher_ref is SFT on random C forms; the teacher's
    "RL shift" is a few more steps on the last C form of every op (``fmaxf``, ``v < 0.0f ? -v : v``, ...)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model: threads only add overhead
    torch.manual_seed(0)
    train, held = split_chains(seed=0, min_len=2, max_len=2, n_train=48, n_heldout=8)
    ref, tok = build_model(smoke_cfg.model, tokenizer_corpus(), 0)
    sft_train(ref, sft_pairs(tok, train, 0), steps=60, batch_size=16, lr=3e-3, seed=0, pad_id=tok.pad_token_id)
    teacher = clone_model(ref)
    for p in teacher.parameters():
        p.requires_grad_(True)
    last = [(encode_prompt(tok, prompt_text(c)), encode_answer(tok, _last_forms(c))) for c in train]
    sft_train(teacher, last, steps=15, batch_size=16, lr=3e-3, seed=1, pad_id=tok.pad_token_id)
    yield clone_model(ref), clone_model(teacher), tok, train, held
    torch.set_num_threads(threads)


@torch.no_grad()
def _first_token_kl(student: Any, teacher: Any, tok: Any, chains: list) -> float:
    """KL(student || teacher) of the first answer token on plain prompt forwards (no response alignment code)."""
    out = []
    for c in chains:
        ids = torch.tensor([encode_prompt(tok, prompt_text(c))])
        ls = torch.log_softmax(student(input_ids=ids).logits[0, -1], -1)
        lt = torch.log_softmax(teacher(input_ids=ids).logits[0, -1], -1)
        out.append(float((ls.exp() * (ls - lt)).sum()))
    return sum(out) / len(out)


@torch.no_grad()
def _teacher_answer_loglik(model: Any, tok: Any, chains: list) -> float:
    """Mean log-likelihood of the teacher-preferred answers (last C forms) of `chains`."""
    total = 0.0
    for c in chains:
        p, a = encode_prompt(tok, prompt_text(c)), encode_answer(tok, _last_forms(c))
        lp = torch.log_softmax(model(input_ids=torch.tensor([p + a])).logits[0, len(p) - 1 : -1], -1)
        total += float(lp.gather(-1, torch.tensor(a).unsqueeze(-1)).sum())
    return total / len(chains)


def _distill(teacher: Any, teacher_ref: Any, start: Any, tok: Any, train: list, steps: int = 15) -> tuple[Any, list]:
    from kernelrl.train.distill import opd_step, sample_responses

    student = clone_model(start)
    for p in student.parameters():
        p.requires_grad_(True)
    anchor = clone_model(start)
    opt = torch.optim.AdamW(student.parameters(), lr=3e-3, weight_decay=0.0)
    engine = Engine(student, tok, max_batch_size=16, max_context=192, seed=0)
    rows = []
    for step in range(steps):
        chains = [train[(step * 4 + i) % len(train)] for i in range(4)]
        prompts, resp = sample_responses(engine, tok, chains, samples=4, max_new_tokens=40, seed=100 * step)
        rows.append(opd_step(student, teacher, teacher_ref, anchor, opt, prompts, resp, DistillConfig(),
                             kl_coef=1.0, pad_id=tok.pad_token_id))
        engine.update_weights()
    return student, rows


def test_opd_pulls_a_copy_of_teacher_ref_to_the_teacher(pair: tuple) -> None:
    ref, teacher, tok, train, held = pair
    kl0, ll0 = _first_token_kl(ref, teacher, tok, held), _teacher_answer_loglik(ref, tok, held)
    assert kl0 > 0.05  # the pair disagrees on held-out prompts
    student, rows = _distill(teacher, ref, ref, tok, train)
    assert all(math.isfinite(v) for r in rows for v in r.values())
    # held-out chains (never sampled in training): KL to the teacher falls, the teacher's answers gain likelihood
    assert _first_token_kl(student, teacher, tok, held) < 0.3 * kl0
    assert _teacher_answer_loglik(student, tok, held) > ll0 + 1.0
    # the logged diagnostic on the student's own samples falls too
    assert sum(r["kl_teacher"] for r in rows[-5:]) < 0.7 * sum(r["kl_teacher"] for r in rows[:5])


def test_opd_with_the_pair_swapped_pushes_away(pair: tuple) -> None:
    """Control: the reversed shift (teacher and teacher_ref swapped) must move the student away from the
    teacher; a sign or alignment error would make the two tests disagree with their expectations."""
    ref, teacher, tok, train, held = pair
    kl0, ll0 = _first_token_kl(ref, teacher, tok, held), _teacher_answer_loglik(ref, tok, held)
    student, _ = _distill(ref, teacher, ref, tok, train)
    assert _first_token_kl(student, teacher, tok, held) > 2 * kl0
    assert _teacher_answer_loglik(student, tok, held) < ll0 - 1.0


def test_distill_smoke(tmp_path: Path, smoke_cfg: TrainConfig, pool: EvalPool) -> None:
    from kernelrl.train.distill import run_distill

    cfg = smoke_cfg.model_copy(deep=True)
    cfg.out_dir = str(tmp_path)
    cfg.sft.steps = 20
    cfg.rl.reward = "milestone"
    cfg.rl.entropy_coef = 0.01  # the teacher moves in its 2 RL steps even when a group's rewards tie
    cfg.distill = cfg.distill.model_copy(update={"teacher_rl_steps": 2, "steps": 3, "prompts_per_step": 2,
                                                  "samples_per_prompt": 2})
    summary = run_distill(cfg, pool=pool)
    run = tmp_path / "distill"
    assert (run / "student.safetensors").is_file() and (run / "distill.json").is_file()
    saved = json.loads((run / "distill.json").read_text())
    assert saved["verdict"] == summary["verdict"] and "->" in summary["verdict"]
    for k in ("before", "after"):
        assert 0.0 <= summary[k]["pass_rate"] <= 1.0 and 0.0 <= summary[k]["fast_1"] <= 1.0
        assert summary[k]["kl_to_teacher"] >= 0.0
    assert 0.0 <= summary["teacher"]["heldout"]["pass_rate"] <= 1.0
    assert summary["teacher"]["heldout"]["kl_to_teacher"] == pytest.approx(0.0, abs=1e-6)
    assert "teacher" in summary["verdict"]
    rows = read_metrics(run, "distill")
    assert len(rows) == 3
    assert all(math.isfinite(r[k]) for r in rows for k in ("opd_reward", "loss", "kl_teacher", "kl_anchor"))
    # the teacher moved during its RL, so the pair disagrees on the student's tokens
    assert any(abs(r["opd_reward"]) > 0 for r in rows)
    assert rows[0]["kl_anchor"] == pytest.approx(0.0, abs=1e-6)  # the student starts as its anchor
    assert (tmp_path / "distill" / "teacher" / "policy.safetensors").is_file()
