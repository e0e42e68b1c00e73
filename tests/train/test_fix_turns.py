"""Feedback-then-fix SFT data for the C family: wrong first drafts, the real gym's verdicts of them, the fix."""

from __future__ import annotations

import random

import pytest

from kernelrl.evaluate import EvalPool
from kernelrl.train import elementwise_chains as chains
from kernelrl.train.config import ModelConfig
from kernelrl.train.engine_episodes import EvalCache
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
    plain, none = warmup_pairs(family, tok, list(CHAINS), 0, 0.0, judge)
    mixed, fixes = warmup_pairs(family, tok, list(CHAINS), 0, 1.0, judge)
    assert none == 0 and plain == family.sft_pairs(tok, list(CHAINS), 0)
    assert fixes > 0 and mixed[: len(plain)] == plain and len(mixed) == len(plain) + fixes

    class NoFixes:
        name = "no-fixes"

        def sft_pairs(self, tok: object, items: list, seed: int) -> list:
            return []

    with pytest.raises(ValueError, match="no feedback-then-fix turns"):
        warmup_pairs(NoFixes(), tok, list(CHAINS), 0, 0.5, judge)
