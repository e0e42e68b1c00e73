"""Hybrid mode of the tiny family (issue 16, Dr. Kernel's lazy optimisation): an answer may leave ops of
the chain to PyTorch; the real gym (torch_ops="allow") judges a lazy answer correct with low time-based
coverage and a full kernel with high coverage, and the PR reward and PRS tell them apart."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, EvalResult
from kernelrl.rewards import coverage, get_reward, prs_keep_mask, prs_keep_probability
from kernelrl.rewards.kernel import soft_violations
from kernelrl.train import elementwise_chains as chains
from kernelrl.train.config import load_config
from kernelrl.train.job import eval_config
from kernelrl.train.model import build_model
from kernelrl.train.task_family import TinyFamily, make_family

CHAIN = ("mul 2.0", "add 0.5", "relu", "sub 3.0", "abs", "mul 0.5")  # lazy: 1 of 6 ops in C (coverage ~ 1/6)


def test_hybrid_answer_syntax() -> None:
    lazy = chains.lazy_solution(CHAIN)
    assert lazy.count("x = ") == 5 and lazy.endswith("v = v * 0.5f;")
    src = chains.hybrid_candidate_source(lazy + "</s> junk")
    assert "        x = x * 2.0\n" in src and "        x = torch.relu(x)\n" in src
    assert src.count("void seg") == 1 and 'functions=["seg0"]' in src
    compile(src, "<hybrid>", "exec")
    # C runs split by a torch line become two kernels, called in order
    mixed = chains.hybrid_candidate_source(" v = v * 2.0f; x = torch.relu(x); v = v + 0.5f; v = -v;")
    assert 'functions=["seg0", "seg1"]' in mixed and "v = v + 0.5f; v = -v;" in mixed
    assert mixed.index("lib.seg0") < mixed.index("torch.relu") < mixed.index("lib.seg1")
    # all torch: an identity kernel is still called; a non-torch statement on x is passed through as C
    assert "lib.seg0" in chains.hybrid_candidate_source(" x = torch.relu(x);")
    assert "x = __import__" not in chains.hybrid_candidate_source(" x = __import__('os');").split("class ModelNew")[1]
    # the non-hybrid template is unchanged: a torch line there is C and fails to build
    assert "x = torch.relu(x);" in chains.candidate_source(" x = torch.relu(x);")


def test_config_switch_family_and_sft_data() -> None:
    cfg = load_config("smoke", overrides=["task.hybrid=true", "task.lazy_fraction=0.5"])
    assert eval_config(cfg).torch_ops == "allow"
    assert eval_config(load_config("smoke")).torch_ops == "reject"
    fam = make_family(cfg.task, cfg.seed)
    assert isinstance(fam, TinyFamily) and fam.hybrid
    _, tok = build_model(cfg.model, fam.tokenizer_corpus(), 0)
    pairs = fam.sft_pairs(tok, fam.train_items, 0)
    texts = [tok.decode(a, skip_special_tokens=True) for _, a in pairs]
    lazy = sum("x = " in t for t in texts)
    assert 0.3 * len(texts) < lazy < 0.7 * len(texts)  # some lazy answers exist before RL
    plain = TinyFamily(fam.train_items, [])  # type: ignore[arg-type]
    assert not any("x = " in tok.decode(a) for _, a in plain.sft_pairs(tok, fam.train_items, 0))


@pytest.fixture(scope="module")
def hybrid_pool() -> Iterator[EvalPool]:
    # enough timed calls for ~100 instruction-pointer samples at 1 kHz
    cfg = EvalConfig(correctness_trials=2, warmup=1, timing_trials=60, timing_budget_s=2.0, num_threads=1,
                     torch_ops="allow")
    with EvalPool(1, cfg, sandbox="none") as p:
        yield p


def judge(pool: EvalPool, answer: str) -> EvalResult:
    # 8 MB tensors: at 2 MB the timed requests hold ~10 compute samples and the fraction is noisy
    task = chains.make_task(CHAIN, 2048, 1024)
    return pool.submit(task, Candidate(chains.hybrid_candidate_source(answer), "cpu")).result()


def test_lazy_vs_full_kernel_through_the_gym(hybrid_pool: EvalPool) -> None:
    lazy = judge(hybrid_pool, chains.lazy_solution(CHAIN))
    full = judge(hybrid_pool, chains.solution(CHAIN))
    assert lazy.correct and full.correct, (lazy.error, full.error)
    assert lazy.coverage is not None and lazy.coverage["method"] in ("perf", "ptrace")
    assert coverage(lazy) < 0.5 and coverage(full) > 0.8, (lazy.coverage, full.coverage)
    # the judge counts the torch ops the lazy answer left in forward as a field (and says so in a note)
    assert lazy.torch_ops and not full.torch_ops, (lazy.torch_ops, full.torch_ops)
    assert any(n.startswith("torch compute ops in forward: ") for n in lazy.notes)
    assert soft_violations(lazy) >= 1 and soft_violations(full) == 0
    # PR: the coverage term separates them even at equal speedup
    pr = get_reward("coverage")
    no_speed = [EvalResult.from_dict({**r.to_dict(), "timing": None}) for r in (lazy, full)]
    assert pr(no_speed[1]) - pr(no_speed[0]) > 0.3
    assert pr(full) != pr(lazy)
    # PRS with the default ramp (0.3, 0.1) drops the lazy one (coverage at or below 0.3) and keeps the full one
    assert coverage(lazy) <= 0.3, lazy.coverage
    assert prs_keep_probability(lazy) == 0.0 and prs_keep_probability(full) == 1.0
    assert prs_keep_mask([[lazy], [full]], rng=random.Random(0)) == [[False], [True]]
