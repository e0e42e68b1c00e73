"""Feedback-then-fix SFT data for the C family: wrong first drafts, the real gym's verdicts of them, the fix."""

from __future__ import annotations

import random

import pytest

from kernelrl.evaluate import EvalPool
from kernelrl.train import elementwise_chains as chains
from kernelrl.train.config import ModelConfig, load_config
from kernelrl.train.engine_episodes import EvalCache
from kernelrl.train.job import eval_config
from kernelrl.train.model import build_model
from kernelrl.train.task_family import TinyFamily, warmup_pairs

CHAINS = [("relu", "mul 2.0", "abs"), ("neg", "add 0.5"), ("square", "sub 3.0", "clamp")]


def test_every_mistake_changes_the_answer() -> None:
    rng = random.Random(0)
    for chain in CHAINS:
        for kind in chains.applicable(chain):
            assert chains.answer_statements(chains.corrupt(chain, kind, rng)) != chains.answer_statements(chains.solution(chain))
    with pytest.raises(ValueError, match="unknown mistake"):
        chains.corrupt(CHAINS[0], "typo", rng)


def test_fix_pairs_hold_the_bad_draft_its_real_verdict_and_a_correct_answer(pool: EvalPool) -> None:
    family = TinyFamily(list(CHAINS), [], rows=64, cols=256)
    _, tok = build_model(ModelConfig(vocab_size=400, max_positions=256), family.tokenizer_corpus(), 0)
    pairs, texts = family.fix_pairs(tok, list(CHAINS) * 2, 0, EvalCache(pool, family).submit)
    assert pairs and len(pairs) == len(texts)
    statuses = set()
    for (context, answer), text in zip(pairs, texts, strict=True):
        decoded = tok.decode(context, skip_special_tokens=True)
        chain = next(c for c in CHAINS if decoded.startswith(chains.prompt_text(c)))
        assert decoded.endswith(text.strip()) and "fix:" in text  # opening, draft, the gym's verdict, the cue
        statuses.add(text.split()[1])
        fixed = tok.decode(answer, skip_special_tokens=True)
        assert family.candidate(chain, fixed) is not None and answer[-1] == tok.eos_token_id
        # the fix is a correct answer: one of each op's C forms, in the chain's order
        fix = chains.answer_statements(fixed)
        assert len(fix) == len(chain) and all(f"{stmt};" in chains.OPS[w].c_forms for stmt, w in zip(fix, chain, strict=True))
        draft = tok.decode(context[len(family.prompt_ids(tok, chain)):], skip_special_tokens=True)
        assert draft.split("result:")[0].split() != fixed.split()  # the draft before it differs (a missing ";" included)
    assert statuses <= {"incorrect", "compile_error"} and statuses, statuses


def test_warmup_pairs_add_fix_turns_only_when_asked(pool: EvalPool) -> None:
    family = TinyFamily(list(CHAINS), [], rows=64, cols=256)
    _, tok = build_model(ModelConfig(vocab_size=400, max_positions=256), family.tokenizer_corpus(), 0)
    judge = EvalCache(pool, family).submit
    plain = warmup_pairs(family, tok, list(CHAINS), 0, 0.0, judge)
    mixed = warmup_pairs(family, tok, list(CHAINS), 0, 1.0, judge)
    assert plain.fixes == plain.fasters == 0 and plain.pairs == family.sft_pairs(tok, list(CHAINS), 0)
    assert mixed.fixes > 0 and mixed.fasters == 0 and mixed.pairs[: len(plain.pairs)] == plain.pairs
    assert len(mixed.pairs) == len(plain.pairs) + mixed.fixes
    both = warmup_pairs(family, tok, list(CHAINS), 0, 1.0, judge, faster_fraction=1.0)
    assert both.pairs[: len(mixed.pairs)] == mixed.pairs and both.fasters == len(CHAINS)

    class NoFixes:
        name = "no-fixes"

        def sft_pairs(self, tok: object, items: list, seed: int) -> list:
            return []

    with pytest.raises(ValueError, match="no feedback-then-fix turns"):
        warmup_pairs(NoFixes(), tok, list(CHAINS), 0, 0.5, judge)
    with pytest.raises(ValueError, match=r"sft\.faster_fraction=0\.5: .* no feedback-then-faster turns"):
        warmup_pairs(NoFixes(), tok, list(CHAINS), 0, 0.0, judge, faster_fraction=0.5)


def test_faster_pairs_hold_a_correct_lazy_draft_its_timed_verdict_and_an_all_c_answer() -> None:
    """Hybrid mode: the draft leaves all but one op to PyTorch; the gym (torch ops allowed, as hybrid runs
    set it) times it, so the feedback carries its speedup and the `faster:` cue, as in RL; the target writes
    every op in C."""
    family = TinyFamily(list(CHAINS), [], rows=64, cols=256, hybrid=True)
    _, tok = build_model(ModelConfig(vocab_size=400, max_positions=256), family.tokenizer_corpus(), 0)
    with EvalPool(1, eval_config(load_config("smoke", overrides=["task.hybrid=true"])), sandbox="none") as hybrid:
        pairs, texts = family.faster_pairs(tok, list(CHAINS), 0, EvalCache(hybrid, family).submit)
    assert len(pairs) == len(CHAINS) == len(texts)
    for (context, answer), text in zip(pairs, texts, strict=True):
        assert text.startswith("\nresult: ok ") and text.endswith("x\nfaster:"), text
        decoded = tok.decode(context, skip_special_tokens=True)
        chain = next(c for c in CHAINS if decoded.startswith(chains.prompt_text(c)))
        draft = chains.answer_statements(decoded[len(chains.prompt_text(chain)):].split("result:")[0])
        assert sum(chains.is_torch_statement(stmt) for stmt in draft) == len(chain) - 1  # lazy: one op in C
        target = chains.answer_statements(tok.decode(answer, skip_special_tokens=True))
        assert len(target) == len(chain) and not any(chains.is_torch_statement(stmt) for stmt in target)
