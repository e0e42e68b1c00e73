"""Trainer numerics (issue 26): the quantities `RLTrainer` computes, checked against independent
hand computations on a tiny untrained model with hand-made samples (no gym, no rollout).

- GAE with tool calls runs over, and is whitened over, the policy's own tokens only;
- mismatch-correction weights come from pi_old / pi_rollout (decoupled PPO), computed once, also
  in a multi-epoch sync run and in a CoPRIS run;
- loss denominators count only the tokens (or sequences) that survive rejection, whatever the
  micro-batching, for every loss aggregation.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from kernelrl.train.config import TrainConfig
from kernelrl.train.critic import ValueModel, critic_update
from kernelrl.train.logprobs import response_logprobs
from kernelrl.train.rollout import Sample
from kernelrl.train.trainer import RLTrainer
from tests.train.test_prs_loss_mask import sample, trainer, verdict

# per-token log-prob shifts of the behaviour policy: pi_old / pi_rollout = exp(-shift)
SHIFTS = [0.6, -0.3, -0.5, 0.1, 0.05, -0.2, 0.9]


def _params(model: Any) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _grads(params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]


def _forward(model: Any, samples: list[Sample], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs ``[N, T]`` and the policy-token mask (tool outputs excluded) of `samples`."""
    lp, _, mask = response_logprobs(model, [s.prompt_ids for s in samples], [s.response_ids for s in samples],
                                    pad_id=pad)
    own = torch.zeros_like(mask)
    for i, s in enumerate(samples):
        own[i, : len(s.response_ids)] = torch.tensor(s.model_mask())
    return lp, mask & own


def _stale(tr: RLTrainer, samples: list[Sample]) -> None:
    """Give the samples behaviour log-probs that differ from the current policy's by `SHIFTS`."""
    with torch.no_grad():
        lp, _ = _forward(tr.model, samples, tr.pad)
    k = 0
    for i, s in enumerate(samples):
        s.rollout_logprobs = []
        for t in range(len(s.response_ids)):
            s.rollout_logprobs.append(float(lp[i, t]) + SHIFTS[k % len(SHIFTS)])
            k += 1


def _rollout_lp(samples: list[Sample], width: int) -> torch.Tensor:
    out = torch.zeros(len(samples), width)
    for i, s in enumerate(samples):
        out[i, : len(s.rollout_logprobs)] = torch.tensor(s.rollout_logprobs)
    return out


def _clip_token_loss(lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, cfg: Any) -> torch.Tensor:
    """PPO's clipped surrogate per token (Schulman et al. 2017, Eq. 7, DAPO's clip-higher), by hand."""
    ratio = torch.exp(lp - old)
    return torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high))


def _batch() -> list[Sample]:
    """Four single-turn answers of one prompt, of different lengths and rewards."""
    return [sample(0, 0, 1.0, verdict(True), [11, 12, 13, 14]), sample(1, 0, 0.0, verdict(False), [21, 22]),
            sample(2, 0, 0.5, verdict(True), [31, 32, 33, 34, 35, 36]), sample(3, 0, 0.2, verdict(False), [41, 42, 43])]


def _close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert any(float(w.abs().max()) > 0 for w in want)
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, rtol=1e-4, atol=1e-7), float((g - w).abs().max())


# ----------------------------------------------------------------------------- GAE with tool calls

def _tool_episodes() -> list[Sample]:
    """Episode 0: a turn with a tool output inside it, then a second turn; episode 1: one turn with a
    tool output; episode 2: one plain turn. All of one prompt."""
    e0t0 = sample(0, 0, 0.0, verdict(False), [11, 12])
    e0t0.extend([60, 61, 62], "", logprobs=None)
    e0t0.extend([13, 14], "", logprobs=[-1.0, -1.0])
    e1t0 = sample(1, 0, 0.5, verdict(True), [31, 32, 33])
    e1t0.extend([70, 71], "", logprobs=None)
    e1t0.extend([34], "", logprobs=[-1.0])
    return [e0t0, sample(0, 1, 1.0, verdict(True), [21, 22, 23]), e1t0, sample(2, 0, 0.0, verdict(False), [41, 42])]


def _hand_gae(samples: list[Sample], values: torch.Tensor, gamma: float, lam: float) -> tuple[dict, dict]:
    """GAE (Schulman et al. 2016, Eq. 16) over each episode's policy tokens laid end to end, a turn's
    reward on its last policy token; tool outputs skipped. -> ({(row, t): A}, {(row, t): A + V})."""
    adv: dict[tuple[int, int], float] = {}
    ret: dict[tuple[int, int], float] = {}
    episodes: dict[tuple[int, int], list[int]] = {}
    for i, s in enumerate(samples):
        episodes.setdefault((s.group, s.episode), []).append(i)
    for rows in episodes.values():
        steps = []  # (row, t, reward)
        for i in sorted(rows, key=lambda r: samples[r].turn):
            own = [t for t, m in enumerate(samples[i].model_mask()) if m]
            steps += [(i, t, samples[i].reward if t == own[-1] else 0.0) for t in own]
        next_v = next_a = 0.0
        for i, t, r in reversed(steps):
            v = float(values[i, t])
            a = r + gamma * next_v - v + gamma * lam * next_a
            adv[(i, t)], ret[(i, t)] = a, a + v
            next_v, next_a = v, a
    return adv, ret


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.9, 0.8)])
def test_gae_with_tool_calls_runs_and_whitens_over_policy_tokens(smoke_cfg: TrainConfig, gamma: float,
                                                                 lam: float) -> None:
    tr = trainer(smoke_cfg, algo="gae", gamma=gamma, gae_lambda=lam)
    assert tr.critic is not None
    torch.manual_seed(1)  # a critic with non-zero values (its head starts at zero)
    torch.nn.init.normal_(tr.critic.model.head.weight, std=1.0)
    torch.nn.init.constant_(tr.critic.model.head.bias, 0.3)
    samples = _tool_episodes()
    batch = tr.advantages_and_mask(samples)
    assert batch.values is not None and batch.returns is not None
    assert float(batch.values.abs().max()) > 0
    adv, ret = _hand_gae(samples, batch.values, gamma, lam)
    raw = torch.tensor(list(adv.values()), dtype=torch.float64)
    white = (raw - raw.mean()) / torch.sqrt(raw.var(unbiased=False) + 1e-8)  # population variance
    for (i, t), w in zip(adv, white.tolist(), strict=True):
        assert float(batch.advantages[i, t]) == pytest.approx(w, abs=1e-5)
        assert float(batch.returns[i, t]) == pytest.approx(ret[(i, t)], abs=1e-5)
    tool = ~batch.mask
    assert float(batch.advantages[tool].abs().sum()) == 0.0 and float(batch.returns[tool].abs().sum()) == 0.0


# ----------------------------------------------------------------------------- mismatch weights from pi_old

def test_multi_epoch_sync_weights_come_from_pi_old(smoke_cfg: TrainConfig) -> None:
    """Two PPO epochs with token TIS: each epoch's gradient is that of the clipped surrogate against the
    frozen pi_old, times ``min(pi_old / pi_rollout, 2)`` computed once (verl's decoupled mode)."""
    tr = trainer(smoke_cfg, algo="grpo", turns=1, ppo_epochs=2, lr=0.01, mismatch="token_tis",
                 mismatch_options={"upper": 1.5})
    samples = _batch()
    _stale(tr, samples)
    start = copy.deepcopy(tr.model)
    seen: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
    tr.opt.register_step_pre_hook(lambda opt, *_: seen.append(
        ([p.detach().clone() for p in _params(tr.model)], _grads(_params(tr.model)))))
    adv = tr.advantages_and_mask(samples).advantages
    tr.update(samples)
    assert len(seen) == 2
    with torch.no_grad():
        old, mask = _forward(start, samples, tr.pad)
    roll = _rollout_lp(samples, mask.shape[1])
    w = torch.exp(old - roll).clamp(max=1.5)
    assert bool((w[mask] == 1.5).any()) and bool((w[mask] < 1.0).any())
    for params, grads in seen:
        model = copy.deepcopy(start)
        with torch.no_grad():
            for p, v in zip(_params(model), params, strict=True):
                p.copy_(v)
        lp, _ = _forward(model, samples, tr.pad)
        loss = (_clip_token_loss(lp, old, adv[:, : lp.shape[1]], tr.cfg) * w)[mask].sum() / mask.sum()
        loss.backward()
        _close(grads, _grads(_params(model)))
    assert not torch.equal(seen[0][0][0], seen[1][0][0])  # the second epoch ran at moved weights


def test_copris_with_correction_is_decoupled_ppo(smoke_cfg: TrainConfig) -> None:
    """CoPRIS with token TIS: the PPO ratio is against pi_old (the policy at the update's start) and the
    weights are ``min(pi_old / pi_behaviour, upper)``: the behaviour ratio is counted once, not twice."""
    tr = trainer(smoke_cfg, algo="grpo", turns=1, rollout="copris", concurrency=4, mismatch="token_tis",
                 mismatch_options={"upper": 1.5})
    samples = _batch()
    _stale(tr, samples)
    adv = tr.advantages_and_mask(samples).advantages
    params = _params(tr.model)
    lp, mask = _forward(tr.model, samples, tr.pad)
    old = lp.detach()
    w = torch.exp(old - _rollout_lp(samples, mask.shape[1])).clamp(max=1.5)
    tr.model.zero_grad(set_to_none=True)
    ((_clip_token_loss(lp, old, adv, tr.cfg) * w)[mask].sum() / mask.sum()).backward()
    want = _grads(params)
    tr.model.zero_grad(set_to_none=True)
    m = tr.update(samples)
    _close(_grads(params), want)
    assert "is/token_tis/ratio_mean" in m


def test_copris_without_correction_keeps_the_behaviour_ratio(smoke_cfg: TrainConfig) -> None:
    """CoPRIS alone (bypass): the PPO ratio is pi_theta / pi_behaviour, no extra weights."""
    tr = trainer(smoke_cfg, algo="grpo", turns=1, rollout="copris", concurrency=4)
    samples = _batch()
    _stale(tr, samples)
    adv = tr.advantages_and_mask(samples).advantages
    params = _params(tr.model)
    lp, mask = _forward(tr.model, samples, tr.pad)
    roll = _rollout_lp(samples, mask.shape[1])
    tr.model.zero_grad(set_to_none=True)
    (_clip_token_loss(lp, roll, adv, tr.cfg)[mask].sum() / mask.sum()).backward()
    want = _grads(params)
    tr.model.zero_grad(set_to_none=True)
    tr.update(samples)
    _close(_grads(params), want)


# ----------------------------------------------------------------------------- denominators after rejection

REJECTIONS = [("token_mis", {"upper": 1.5, "lower": 0.7}), ("token_veto", {"threshold": 0.5}),
              ("seq_mis", {"upper": 2.0, "lower": 0.5})]


@pytest.mark.parametrize(("name", "options"), REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_token_mean_counts_only_kept_tokens(smoke_cfg: TrainConfig, name: str, options: dict) -> None:
    """Rejection sampling (masked IS, veto): the token mean divides by the tokens it keeps, across
    micro-batches of two (verl, KernelGYM)."""
    tr = trainer(smoke_cfg, algo="grpo", turns=1, mismatch=name, mismatch_options=options)
    samples = _batch()
    _stale(tr, samples)
    adv = tr.advantages_and_mask(samples).advantages
    params = _params(tr.model)
    lp, mask = _forward(tr.model, samples, tr.pad)
    old = lp.detach()
    log_w = old - _rollout_lp(samples, mask.shape[1])
    if name == "token_mis":
        keep, w = mask & (log_w.exp() <= 1.5) & (log_w.exp() >= 0.7), log_w.exp()
    elif name == "token_veto":
        keep, w = mask & ~((log_w.exp() < 0.5) & mask).any(-1, keepdim=True), torch.ones_like(log_w)
    else:
        seq = torch.where(mask, log_w, torch.zeros_like(log_w)).sum(-1, keepdim=True).exp()
        keep, w = mask & (seq <= 2.0) & (seq >= 0.5), seq.clamp(max=2.0).expand_as(log_w)
    assert 0 < int(keep.sum()) < int(mask.sum())  # something is rejected, something kept
    tr.model.zero_grad(set_to_none=True)
    ((_clip_token_loss(lp, old, adv, tr.cfg) * w)[keep].sum() / keep.sum()).backward()
    want = _grads(params)
    tr.model.zero_grad(set_to_none=True)
    tr.update(samples)
    _close(_grads(params), want)


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_sequence_aggregations_do_not_depend_on_micro_batching(smoke_cfg: TrainConfig, agg: str) -> None:
    """Micro-batches of two give the gradient of the whole batch's aggregate: sequence means weight each
    micro-batch by its share of sequences, and Dr. GRPO's constant is the generation budget
    ``rl.max_new_tokens`` (Liu et al. 2025), not the micro-batch's padded width."""
    tr = trainer(smoke_cfg, algo="grpo", turns=1, loss_agg=agg)
    samples = _batch()
    adv = tr.advantages_and_mask(samples).advantages
    params = _params(tr.model)
    lp, mask = _forward(tr.model, samples, tr.pad)
    tok = torch.where(mask, _clip_token_loss(lp, lp.detach(), adv, tr.cfg), torch.zeros_like(lp))
    n = len(samples)
    if agg == "seq-mean-token-mean":
        loss = (tok.sum(-1) / mask.sum(-1)).sum() / n
    elif agg == "seq-mean-token-sum":
        loss = tok.sum() / n
    else:
        loss = tok.sum() / (n * tr.cfg.max_new_tokens)
    tr.model.zero_grad(set_to_none=True)
    loss.backward()
    want = _grads(params)
    tr.model.zero_grad(set_to_none=True)
    tr.update(samples)
    _close(_grads(params), want)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_critic_update_does_not_depend_on_micro_batching(smoke_cfg: TrainConfig, agg: str) -> None:
    """The critic's clipped value loss: one SGD step with micro-batches of one equals one on the whole batch."""
    tr = trainer(smoke_cfg, algo="gae")
    samples = _batch()
    _, mask = _forward(tr.model, samples, tr.pad)
    returns = torch.linspace(-1.0, 1.0, mask.numel()).reshape(mask.shape) * mask
    moved = []
    for mbs in (1, len(samples)):
        critic = ValueModel.from_policy(tr.model)
        torch.nn.init.constant_(critic.head.bias, 0.3)
        before = [p.detach().clone() for p in critic.parameters()]
        old = torch.full(mask.shape, 0.3) * mask
        critic_update(critic, torch.optim.SGD(critic.parameters(), lr=1.0), [s.prompt_ids for s in samples],
                      [s.response_ids for s in samples], old, returns, mask, pad_id=tr.pad, micro_batch_size=mbs,
                      clip_range=10.0, agg=agg, max_grad_norm=1e9, max_length=tr.cfg.max_new_tokens)
        moved.append([a.detach() - b for a, b in zip(critic.parameters(), before, strict=True)])
    _close(moved[0], moved[1])
