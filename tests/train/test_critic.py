"""PPO with a learned critic (`rl.algo=gae`, `kernelrl.train.critic`) on a tiny model against the real gym."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from kernelrl.evaluate import EvalPool
from kernelrl.rl import ADVANTAGE_ESTIMATORS
from kernelrl.rl.value import gae_advantages
from kernelrl.train import elementwise_chains as chains
from kernelrl.train.config import TrainConfig
from kernelrl.train.critic import episode_gae
from kernelrl.train.model import build_model, encode_answer
from kernelrl.train.rollout import EvalCache, Sample
from kernelrl.train.task_family import TinyFamily
from kernelrl.train.trainer import RLTrainer


@pytest.fixture(scope="module")
def trainer(smoke_cfg: TrainConfig, pool: EvalPool) -> RLTrainer:
    """An untrained tiny policy (the critic test needs no skill) with a critic; binary rewards (no timing
    noise); the wide value clip lets the fixed-batch fit show in a few steps."""
    train, held = chains.split_chains(seed=0, min_len=2, max_len=2, n_train=16, n_heldout=4)
    model, tok = build_model(smoke_cfg.model, chains.tokenizer_corpus(), 0)
    cache = EvalCache(pool, TinyFamily(train, held, rows=64, cols=256))
    cfg = smoke_cfg.rl.model_copy(update={"algo": "gae", "reward": "binary", "critic_lr": 3e-3, "value_clip": 10.0})
    return RLTrainer(cfg, model, tok, cache, train, seed=0, max_context=smoke_cfg.model.max_positions)


def fixed_batch(tr: RLTrainer) -> list[Sample]:
    """Two answers per chain, judged by the real gym: a correct kernel body and a broken one."""
    family, out = tr.rollout.family, []
    for g, chain in enumerate(tr.rollout.stream.items[:3]):
        for text in (chains.solution(chain), " x = ;"):
            ids = encode_answer(tr.tok, text)
            out.append(Sample(g, len(out), 0, chain, family.prompt_ids(tr.tok, chain), ids, [0.0] * len(ids),
                              [0] * len(ids), text, "stop", tr.rollout.cache.submit(chain, text).result()))
    tr.score(out)
    return out


def test_gae_run_trains_critic_and_policy(trainer: RLTrainer) -> None:
    samples = fixed_batch(trainer)
    rewards = torch.tensor([s.reward for s in samples])
    assert rewards.max() > 0 and rewards.min() == 0  # the gym passed the correct bodies only
    before = trainer.advantages_and_mask(samples)
    assert before.values is not None and before.returns is not None
    assert float(before.values.abs().max()) == 0.0  # zero-initialised head: V = 0, returns = rewards-to-go
    losses = [trainer.update_critic(trainer.advantages_and_mask(samples))["critic/value_loss"] for _ in range(8)]
    assert all(b < a for a, b in itertools.pairwise(losses)) and losses[-1] < 0.6 * losses[0], losses
    # the advantages are the registered gae estimator's (Schulman et al. 2016, Eq. 16) on the critic's values
    after = trainer.advantages_and_mask(samples)
    assert after.values is not None and float(after.values.abs().max()) > 0
    expect = ADVANTAGE_ESTIMATORS.get("gae")(rewards, None, after.mask, values=after.values,
                                              gamma=trainer.cfg.gamma, lam=trainer.cfg.gae_lambda)
    assert torch.allclose(after.advantages, expect, atol=1e-5)
    assert not torch.allclose(after.advantages, before.advantages, atol=1e-3)
    # one full RL step (real rollout, gym, GAE, PPO clip loss, critic step) moves both models
    assert trainer.critic is not None and "critic" in trainer.optimizers
    policy = [p.detach().clone() for p in trainer.model.parameters()]
    critic = [p.detach().clone() for p in trainer.critic.model.parameters()]
    m = trainer.step()
    assert all(math.isfinite(v) for v in m.values()), m
    assert m["critic/value_loss"] > 0 and m["adv_abs_mean"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(policy, trainer.model.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(critic, trainer.critic.model.parameters(), strict=True))


def test_episode_gae_bootstraps_across_turns() -> None:
    """Two turns of one episode laid end to end: the first turn's returns include the second's reward and
    equal GAE over the concatenated response tokens."""
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    values = torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.4, 0.5]])
    adv, ret = episode_gae([[0, 1]], torch.tensor([0.0, 2.0]), values, mask, gamma=0.9, lam=0.8)
    flat_r = torch.tensor([[0.0, 0.0, 0.0, 0.0, 2.0]])
    ones = torch.ones(1, 5, dtype=torch.bool)
    _, flat_ret = gae_advantages(flat_r, values[mask].unsqueeze(0), ones, 0.9, 0.8)
    assert torch.allclose(ret[mask], flat_ret[0])
    flat_adv = ADVANTAGE_ESTIMATORS.get("gae")(torch.zeros(1), None, ones, values=values[mask].unsqueeze(0),
                                               token_rewards=flat_r, gamma=0.9, lam=0.8)
    assert torch.allclose(adv[mask], flat_adv[0], atol=1e-6)
    assert float(adv[~mask].abs().sum()) == 0.0 and float(ret[~mask].abs().sum()) == 0.0
