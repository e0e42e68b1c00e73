"""Each algorithm and rollout mode runs real steps against the real gym on a tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from kernelrl.evaluate import EvalPool
from kernelrl.train.config import TrainConfig
from kernelrl.train.elementwise_chains import split_chains, tokenizer_corpus
from kernelrl.train.job import eval_config, sft_pairs
from kernelrl.train.model import build_model
from kernelrl.train.rollout import EvalCache
from kernelrl.train.sft import sft_train
from kernelrl.train.task_family import TinyFamily
from kernelrl.train.trainer import RLTrainer


@pytest.fixture(scope="module")
def setup(smoke_cfg: TrainConfig, pool: EvalPool) -> tuple:
    train, held = split_chains(seed=0, min_len=2, max_len=2, n_train=16, n_heldout=4)
    model, tok = build_model(smoke_cfg.model, tokenizer_corpus(), 0)
    losses = sft_train(model, sft_pairs(tok, train, 0), steps=30, batch_size=8, lr=3e-3, seed=0)
    assert losses[-1] < losses[0]  # SFT learns
    cache = EvalCache(pool, TinyFamily(train, held, rows=64, cols=256))
    return model.state_dict(), tok, cache, train


def trainer_for(smoke_cfg: TrainConfig, setup: tuple, **rl: object) -> RLTrainer:
    state, tok, cache, train = setup
    model, _ = build_model(smoke_cfg.model, tokenizer_corpus(), 0)
    model.load_state_dict(state)
    cfg = smoke_cfg.rl.model_copy(update={"reward": "milestone", **rl})
    return RLTrainer(cfg, model, tok, cache, train, seed=0, max_context=smoke_cfg.model.max_positions)


CASES = [
    {"algo": "grpo", "rollout": "copris", "concurrency": 3, "mismatch": "token_tis"},
    {"algo": "rloo", "kl_coef": 0.1, "entropy_coef": 0.01},
    {"algo": "trloo", "turns": 2},
    {"algo": "prime"},
    {"algo": "reinforce++", "ppo_epochs": 2, "lr_schedule": "cosine"},
    {"algo": "drgrpo", "prs": "geometric", "loss_agg": "seq-mean-token-sum-norm", "dynamic_sampling": True},
]


@pytest.mark.parametrize("rl", CASES, ids=[c["algo"] + "-" + str(c.get("rollout", "sync")) for c in CASES])
def test_algorithm_steps(smoke_cfg: TrainConfig, setup: tuple, rl: dict) -> None:
    tr = trainer_for(smoke_cfg, setup, **rl)
    before = [p.detach().clone() for p in tr.model.parameters()]
    prm_before = [p.detach().clone() for p in tr.prm.parameters()] if tr.prm is not None else None
    moved = False
    for _ in range(2):
        m = tr.step()
        assert all(math.isfinite(v) for v in m.values()), m
        if m.get("adv_abs_mean", 0.0) > 0:
            assert m["grad_norm"] > 0
            moved = True
        if m.get("kept_fraction", 0.0) > 0 and (rl.get("kl_coef") or rl.get("entropy_coef")):
            moved = True  # KL and entropy terms move the policy even without an advantage
    after = list(tr.model.parameters())
    changed = any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert changed == moved
    if rl["algo"] == "prime":
        assert prm_before is not None and tr.prm is not None
        assert any(not torch.equal(a, b) for a, b in zip(prm_before, tr.prm.parameters(), strict=True))
        assert "prime/prm_loss" in m
    if rl.get("rollout") == "copris":
        assert "rollout/stale_fraction" in m and 0.0 <= m["rollout/stale_fraction"] <= 1.0
        assert tr.engine.policy_version >= 1
    if rl.get("mismatch"):
        assert any(k.startswith("is/") for k in m)
    if rl.get("kl_coef"):
        assert "kl_ref" in m and m["kl_ref"] >= 0


def test_multi_turn_feedback(smoke_cfg: TrainConfig, setup: tuple) -> None:
    tr = trainer_for(smoke_cfg, setup, algo="trloo", turns=2)
    samples = tr.rollout.collect()
    first = [s for s in samples if s.turn == 0]
    second = [s for s in samples if s.turn == 1]
    failed = [s for s in first if not s.result.correct]
    assert len(second) == len(failed)  # every unsolved episode got a second turn
    for s in second:
        assert s.result is not None
        assert "result:" in tr.tok.decode(s.prompt_ids)  # the gym's verdict is the next user turn


def test_eval_overlaps_generation(smoke_cfg: TrainConfig, setup: tuple) -> None:
    tr = trainer_for(smoke_cfg, setup, group_size=2, prompts_per_step=2)
    seen: list[bool] = []
    submit = tr.rollout.driver.submit  # the rollout's explicit gym-submission step

    def spy(episode):  # record whether others were still generating when this sample went to the gym
        seen.append(tr.engine.has_unfinished())
        submit(episode)

    tr.rollout.driver.submit = spy
    samples = tr.rollout.collect()
    assert len(seen) == len(samples) == 4
    assert all(s.result is not None for s in samples)
    lengths = {len(s.response_ids) for s in samples}
    if len(lengths) > 1:  # samples finished at different steps: the early ones were judged while others ran
        assert any(seen)


def test_each_step_queues_the_next_steps_references_ahead(smoke_cfg: TrainConfig, setup: tuple) -> None:
    """The prompt stream is seeded, so a step already knows the next step's items: the gym is asked to time
    their references ahead once this step's generation is done, and no further item's."""
    state, tok, _, train = setup
    with EvalPool(1, eval_config(smoke_cfg), sandbox="none") as fresh:
        cache = EvalCache(fresh, TinyFamily(train, [], rows=64, cols=256))
        model, _ = build_model(smoke_cfg.model, tokenizer_corpus(), 0)
        model.load_state_dict(state)
        tr = RLTrainer(smoke_cfg.rl.model_copy(update={"reward": "milestone"}), model, tok, cache, train, seed=0,
                       max_context=smoke_cfg.model.max_positions)
        asked_ahead: list[object] = []
        on_ahead, next_batch = tr.rollout.stream.on_ahead, tr.rollout.scheduler.next_batch
        assert on_ahead is not None
        tr.rollout.stream.on_ahead = lambda item: (asked_ahead.append(item), on_ahead(item))[1]
        ahead_during_generation: list[int] = []

        def generate() -> object:
            batch = next_batch()
            ahead_during_generation.append(len(asked_ahead))
            return batch

        tr.rollout.scheduler.next_batch = generate  # type: ignore[method-assign]
        tr.step()
        stream, per_step = tr.rollout.stream, smoke_cfg.rl.prompts_per_step
        # asked for once generation is done, not while the policy decodes (on 2 cores they would take its CPU)
        assert ahead_during_generation == [0] and len(asked_ahead) == per_step
        assert stream.cursor == per_step and len(train) >= 3 * per_step
        nxt = [cache.family.task(stream.item_at(per_step + i)) for i in range(per_step)]
        after = [cache.family.task(stream.item_at(2 * per_step + i)) for i in range(per_step)]
        assert all(fresh.prefetch(task, ahead=True) is None for task in nxt)  # queued (or timed) already
        assert all(fresh.prefetch(task, ahead=True) is not None for task in after)  # the step after: not yet
