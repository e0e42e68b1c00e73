"""NKI-Agent with a learning policy: the tiny NKI family judged by the real gym (solutions pass, each typical
mistake fails with the feedback naming it), the no-information feedback control, feedback-then-fix SFT turns laid
out as the rollout lays out a second turn, and `kernelrl repro nki-agent --smoke` end to end with a real tiny model."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelrl.cli import main
from kernelrl.evaluate import EvalConfig, EvalPool
from kernelrl.repro.record import config_problems, missing_keys, render_report
from kernelrl.train import nki_chains as nc
from kernelrl.train.config import ModelConfig
from kernelrl.train.model import build_model, encode_answer
from kernelrl.train.nki_family import NkiChainFamily, short_feedback
from kernelrl.train.rollout import EvalCache

CHAINS = [("relu", "mul 2.0", "rowsum"), ("tanh", "add 0.5"), ("sigmoid", "rowmax")]


@pytest.fixture(scope="module")
def pool() -> Iterator[EvalPool]:
    with EvalPool(workers=2, config=EvalConfig(correctness_trials=1, measure_timing=False)) as p:
        yield p


@pytest.fixture(scope="module")
def family() -> NkiChainFamily:
    return NkiChainFamily(CHAINS, [], rows=256, cols=64)


def test_solutions_pass_and_each_mistake_fails_with_feedback_that_names_it(pool: EvalPool, family: NkiChainFamily) -> None:
    cache = EvalCache(pool, family)
    rng = random.Random(0)
    jobs = [(c, "ok", cache.submit(c, nc.solution(c))) for c in CHAINS]
    jobs += [(c, m, cache.submit(c, nc.corrupt(c, m, rng))) for c in CHAINS for m in nc.applicable(c)]
    seen = {}
    for chain, kind, fut in jobs:
        r = fut.result()
        assert r.correct == (kind == "ok"), (chain, kind, r.status, r.error)
        seen[(chain, kind)] = short_feedback(r)
    relu = CHAINS[0]
    assert seen[(relu, "ok")] == "\nresult: ok\nfix:"
    assert seen[(relu, "hbm_compute")] == "\nresult: compile_error err-compute-on-hbm at 1\nfix:"
    assert seen[(relu, "no_store")] == "\nresult: incorrect nan\nfix:"  # unwritten output is NaN
    assert "err-shape-mismatch at 5" in seen[(relu, "no_keepdims")]  # the store: load, 3 ops, store
    assert seen[(relu, "wrong_op")] == "\nresult: incorrect\nfix:"


def test_no_information_feedback_ignores_the_verdict(pool: EvalPool, family: NkiChainFamily) -> None:
    cache = EvalCache(pool, family)
    chain = CHAINS[1]
    rng = random.Random(1)
    bad = {m: cache.submit(chain, nc.corrupt(chain, m, rng)).result() for m in ("hbm_compute", "no_store")}
    gym = {m: family.protocol.feedback_text(r, [5, 6]) for m, r in bad.items()}
    assert gym["hbm_compute"] != gym["no_store"]  # the gym's feedback tells the two apart
    texts = ["\nresult: A\nfix:", "\nresult: B\nfix:", "\nresult: C\nfix:"]
    blind = family.with_feedback("shuffled", texts)
    same_ids = {m: blind.protocol.feedback_text(r, [5, 6]) for m, r in bad.items()}
    assert same_ids["hbm_compute"] == same_ids["no_store"] and same_ids["no_store"] in texts
    drawn = {blind.protocol.feedback_text(bad["no_store"], [i]) for i in range(40)}
    assert drawn == set(texts)  # every pool text comes up, whatever the verdict
    _, tok = build_model(ModelConfig(vocab_size=512), family.tokenizer_corpus(), 0)
    ids = tok.encode(" t = nl.load(x[r, f])", add_special_tokens=False)
    # What the episode loop appends after a verdict (EngineDriver calls the family's protocol.feedback_ids):
    # a merge once left the pool on the family, where the loop never looked, and both arms got the gym's feedback.
    assert tok.decode(blind.protocol.feedback_ids(tok, bad["hbm_compute"], ids)) == blind.protocol.feedback_text(None, ids)
    assert tok.decode(family.protocol.feedback_ids(tok, bad["hbm_compute"], ids)) == gym["hbm_compute"]
    assert blind.protocol.feedback_ids(tok, bad["hbm_compute"], ids) != family.protocol.feedback_ids(tok, bad["hbm_compute"], ids)
    assert blind.heldout_items is family.heldout_items and blind.task(chain) is family.task(chain)
    with pytest.raises(ValueError, match="feedback_mode"):
        NkiChainFamily([], [], feedback_mode="none")


def test_fix_pairs_hold_the_bad_draft_its_real_verdict_and_the_correct_kernel(pool: EvalPool, family: NkiChainFamily) -> None:
    _, tok = build_model(ModelConfig(vocab_size=512, max_positions=320), family.tokenizer_corpus(), 0)
    cache = EvalCache(pool, family)
    pairs, texts = family.fix_pairs(tok, list(CHAINS), 0, cache.submit)
    assert pairs and len(pairs) == len(texts)
    for (ctx, answer), text in zip(pairs, texts, strict=True):
        decoded = tok.decode(ctx, skip_special_tokens=True)
        assert decoded.startswith("nki ops: ") and decoded.endswith(text)  # opening, draft, the gym's feedback
        assert "result: ok" not in text
        fixed = tok.decode(answer, skip_special_tokens=True)
        chain = next(c for c in CHAINS if decoded.startswith(nc.prompt_text(c)))
        assert fixed == nc.solution(chain) and answer[-1] == tok.eos_token_id
        prompt = family.prompt_ids(tok, chain)
        draft = ctx[len(prompt):len(ctx) - len(tok.encode(text, add_special_tokens=False))]
        assert draft[-1] == tok.eos_token_id and draft != encode_answer(tok, nc.solution(chain))
    assert max(len(c) + len(a) for c, a in pairs) < 320


def test_repro_nki_agent_smoke_end_to_end(pool: EvalPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelrl.repro.nki_agent import repro_config, run_nki_agent

    cfg = repro_config(smoke=True)
    res = run_nki_agent(cfg, tmp_path, seeds=(0, 1), pool=pool, echo=False)
    data = json.loads((tmp_path / "results.json").read_text())
    assert not missing_keys(data) and data["seed_list"] == [0, 1] and not config_problems("nki-agent", data["config"])
    assert (tmp_path / "report.md").read_text() == render_report("nki-agent", data)
    assert (tmp_path / "nki-agent.png").stat().st_size > 0
    for d in res["seeds"].values():
        t = d["tools"]
        assert t["best_of_k"]["calls_mean"] == cfg.rl.turns and 1 <= t["feedback"]["calls_mean"] <= cfg.rl.turns
        assert t["feedback"]["episodes"] == t["best_of_k"]["episodes"] == cfg.task.n_heldout * cfg.eval.heldout_samples
        assert d["sft"]["fix_pairs"] > 0 and d["rewards"]["compile"]["reward"] == "compile"
        assert len(d["rewards"]["execution"]["pass_rate"]) == cfg.rl.steps
    c = res["comparisons"]["execution_vs_compile"]
    assert c["n"] == 2 and c["ci95"] is not None and c["verdict"] in ("reproduced", "not reproduced", "underpowered")
    assert main(["repro", "nki-agent", "--smoke", "--print-config"]) == 0
    assert "family: tiny-nki" in capsys.readouterr().out
    assert main(["repro", "nki-agent", "rl.turns=1", "--smoke", "--out", str(tmp_path / "x")]) == 2
    assert "rl.turns is the gym-call budget" in capsys.readouterr().err
