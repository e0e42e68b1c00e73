"""The suite family on the shipped level-1 suite, judged by the real CPU gym: candidates from answers,
multi-turn feedback from the gym's own text, and a short end-to-end `run_train`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalPool
from kernelrl.generation.tiny import build_tiny_tokenizer
from kernelrl.rewards import get_reward
from kernelrl.tasks import solution_path
from kernelrl.train.config import TaskConfig, TrainConfig
from kernelrl.train.job import run_train
from kernelrl.train.logs import read_metrics
from kernelrl.train.rollout import EvalCache
from kernelrl.train.suite_family import SuiteFamily, answer_text
from kernelrl.train.task_family import TaskFamily

IDS = ["level1/01_ReLU", "level1/04_SiLU", "level1/06_Tanh", "level1/12_Axpby"]
TASK = {"family": "suite", "suite": "level1", "backend": "cpu", "task_ids": IDS, "n_heldout": 1,
        "max_bytes": 2**18, "prompt_rules": False, "feedback_tokens": 256}


@pytest.fixture(scope="module")
def family() -> SuiteFamily:
    return SuiteFamily.from_config(TaskConfig(**TASK), seed=0)


@pytest.fixture(scope="module")
def tok(family: SuiteFamily):
    return build_tiny_tokenizer(family.tokenizer_corpus(), vocab_size=320)


def test_split_sizes_and_solutions(family: SuiteFamily, tok) -> None:
    assert isinstance(family, TaskFamily)
    assert len(family.heldout_items) == 1 and len(family.train_items) == 3
    assert set(family.train_items) | set(family.heldout_items) == set(IDS)
    assert all(family.task(i).size_overrides for i in IDS)  # shrunk to the memory budget
    pairs = family.sft_pairs(tok, family.train_items, seed=0)
    assert len(pairs) == 3  # every chosen task ships a cpu solution
    prompt = tok.decode(family.prompt_ids(tok, IDS[0]))
    assert "class Model" in prompt and prompt.rstrip().endswith("<|assistant|>")
    with pytest.raises(ValueError, match="task_ids"):
        SuiteFamily.from_config(TaskConfig(**{**TASK, "task_ids": ["level1/nope"]}), seed=0)


def test_shipped_solution_in_a_fence_passes_and_garbage_scores_zero(family: SuiteFamily, pool: EvalPool) -> None:
    cache = EvalCache(pool, family)
    item = "level1/01_ReLU"
    answer = "Here is a fused kernel.\n\n" + answer_text(solution_path(item).read_text()) + "\nIt is vectorised."
    cand = family.candidate(item, answer)
    assert cand is not None and cand.backend == "cpu" and "class ModelNew" in cand.source
    ok = cache.submit(item, answer).result()
    assert ok.correct, ok.error
    assert get_reward("binary")(ok) > 0 and get_reward("coverage")(ok) > 0
    submitted = cache.submitted
    assert family.candidate(item, "I am not sure how to do this.") is None
    bad = cache.submit(item, "I am not sure how to do this.").result()
    assert bad is None  # no code: no verdict, the one value bench's turns use too (reward 0)
    assert cache.submitted == submitted  # an answer without code never reaches the gym
    assert "could not find any code" in family.protocol.feedback(bad)


def test_feedback_carries_the_gyms_text(family: SuiteFamily, tok, pool: EvalPool) -> None:
    item = "level1/01_ReLU"
    wrong = solution_path(item).read_text().replace("v > 0.0f ? v : 0.0f", "v > 0.0f ? v : 1.0f")
    result = EvalCache(pool, family).submit(item, answer_text(wrong)).result()
    assert not result.correct and result.feedback
    text = family.protocol.feedback(result)
    assert result.feedback.strip() in text and "Fix the problem" in text
    ids = family.protocol.feedback_ids(tok, result, [1, 2, tok.eos_token_id])
    turn = tok.decode(ids)
    assert turn.startswith("\n<|user|>\n") and turn.endswith("<|assistant|>\n")
    assert result.feedback.strip().splitlines()[0] in turn


def test_chat_template_prompt_and_turn(family: SuiteFamily) -> None:
    tok = build_tiny_tokenizer(family.tokenizer_corpus(), vocab_size=300)
    tok.chat_template = ("{% for m in messages %}[{{ m.role }}]{{ m.content }}</s>{% endfor %}"
                         "{% if add_generation_prompt %}[assistant]{% endif %}")
    prompt = tok.decode(family.prompt_ids(tok, IDS[0]))
    assert prompt.startswith("[system]") and prompt.endswith("[assistant]")
    ids = family.protocol.feedback_ids(tok, None, [5, tok.eos_token_id])
    assert ids[0] != tok.eos_token_id  # the response's own end-of-turn token is not repeated
    assert tok.decode(ids).startswith("[user]I could not find any code")


def test_run_train_on_a_suite(tmp_path: Path, smoke_cfg: TrainConfig, pool: EvalPool) -> None:
    cfg = smoke_cfg.model_copy(deep=True)
    cfg.task = TaskConfig(**TASK)
    cfg.model.max_positions = 2048
    cfg.sft.steps, cfg.sft.batch_size = 2, 2
    cfg.rl = cfg.rl.model_copy(update={"steps": 2, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 12,
                                       "turns": 2, "algo": "trloo"})
    cfg.tensorboard = False
    summary = run_train(cfg, run_dir=tmp_path, echo=False, pool=pool)
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "report.md", "policy.safetensors"):
        assert (tmp_path / name).is_file(), name
    assert summary["sft_pairs"] == 3
    saved = json.loads((tmp_path / "summary.json").read_text())
    for phase in ("after_sft", "after_rl"):
        assert saved[phase]["n"] == 1 and 0.0 <= saved[phase]["pass_rate"] <= 1.0
        assert 0.0 <= saved[phase]["fast_1"] <= saved[phase]["pass_rate"]
    rows = read_metrics(tmp_path, "rl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["reward/mean"]) and 0.0 <= r["rollout/pass_rate"] <= 1.0 for r in rows)
    assert "level1 tasks" in (tmp_path / "report.md").read_text()


def test_suite_run_resumes_exactly(tmp_path: Path, smoke_cfg: TrainConfig, pool: EvalPool) -> None:
    """Multi-turn TRLOO on the suite, interrupted after step 2 and resumed: the same metrics step by step."""
    cfg = smoke_cfg.model_copy(deep=True)
    cfg.task = TaskConfig(**TASK)
    cfg.model.max_positions = 2048
    cfg.sft.steps, cfg.sft.batch_size = 2, 2
    cfg.rl = cfg.rl.model_copy(update={"steps": 4, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 12,
                                       "turns": 2, "algo": "trloo"})
    cfg.tensorboard, cfg.checkpoint_every = False, 2
    run_train(cfg, run_dir=tmp_path / "full", echo=False, pool=pool)
    run_train(cfg, run_dir=tmp_path / "split", echo=False, pool=pool, stop_after=2)
    summary = run_train(cfg, run_dir=tmp_path / "split", echo=False, pool=pool, resume=True)
    assert summary["resumed_from"].endswith("step_2")
    a, b = read_metrics(tmp_path / "full", "rl"), read_metrics(tmp_path / "split", "rl")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        for key in ("reward/mean", "rollout/pass_rate", "response_length", "loss", "grad_norm", "adv_abs_mean"):
            assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-7), (ra["step"], key)
