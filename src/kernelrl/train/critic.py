"""The critic of PPO with GAE (`rl.algo=gae`): a value model, per-token values of responses, GAE over
multi-turn episodes, and the clipped value-loss update. CUDA Agent (Dai et al. 2026, "CUDA Agent:
Large-Scale Agentic RL for High-Performance CUDA Kernel Generation", arXiv 2602.24286) trains its
final agentic stage with PPO and a learned critic, which it pretrains with the actor frozen first.

The critic (a choice, documented here): a copy of the policy's transformer trunk (``base_model``:
embeddings and decoder layers, no LM head) with a scalar head ``hidden -> 1``, copied from the policy
when the trainer is built (after SFT / RFT), as PPO for LMs does (the critic starts from the actor or a
reward model). Its own trunk (not shared with the policy) keeps the value loss off the policy's features
and lets the critic train alone while the actor is frozen. The head starts at zero, so an untrained
critic predicts V = 0 and GAE reduces to discounted returns-to-go. The math is `kernelrl.rl.value`
(`gae_advantages`, the registered ``gae`` estimator, `clipped_value_loss`); this module only arranges
the tensors.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from kernelrl.rl import ADVANTAGE_ESTIMATORS, aggregation_units
from kernelrl.rl.masked import masked_mean
from kernelrl.rl.value import clipped_value_loss, gae_advantages
from kernelrl.train.logprobs import joint_batch


class ValueModel(torch.nn.Module):
    """``trunk`` (a transformers base model returning ``last_hidden_state [B, L, H]``) + a linear head
    ``H -> 1``, zero-initialised."""

    def __init__(self, trunk: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    @classmethod
    def from_policy(cls, policy: Any) -> ValueModel:
        """A critic whose trunk is a trainable copy of `policy`'s (``policy.base_model``)."""
        trunk = copy.deepcopy(policy.base_model)
        for p in trunk.parameters():
            p.requires_grad_(True)
        device = next(policy.parameters()).device
        return cls(trunk, int(policy.config.hidden_size)).to(device)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """input_ids, attention_mask ``[B, L]`` -> values ``[B, L]`` (float32)."""
        hidden = self.trunk(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)


def response_values(critic: ValueModel, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *,
                    pad_id: int = 0) -> Tensor:
    """V(s_t) for each response token t: the critic's value at the position before token t, i.e. the
    state the policy sampled token t from (the position whose logits score t). -> ``[B, T]``, zero past
    each response's end (T = the longest response)."""
    ids, attn, index = joint_batch(prompts, responses, pad_id)
    device = next(critic.parameters()).device
    values = critic(ids.to(device), attn.to(device).long())
    lengths = torch.tensor([len(r) for r in responses], device=device)
    valid = torch.arange(index.shape[1], device=device).unsqueeze(0) < lengths.unsqueeze(1)
    out = values.gather(1, index.to(device))
    return torch.where(valid, out, torch.zeros_like(out))


def episode_gae(episodes: Sequence[Sequence[int]], rewards: Tensor, values: Tensor, mask: Tensor, *,
                gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """GAE over whole episodes (Schulman et al. 2016, Eq. 16), whose turns are separate rows.

    `episodes`: the row indices of each episode in turn order. ``mask [N, T]`` marks the actions: the
    policy's own response tokens (any layout: tool outputs inside a turn are holes in it). Each
    episode's actions are laid end to end, in order, and everything else is skipped: the feedback
    between turns and the tool outputs within a turn are the environment's, a state transition, not
    steps (no value, no TD error, no discount step; verl's multi-turn GAE skips observation tokens the
    same way). A turn's reward ``rewards [N]`` sits on its last action; the ``gae`` estimator (advantages
    whitened over the actions of the batch, population variance) and `gae_advantages` (unwhitened
    returns = the critic's targets) run over that layout: an earlier turn's advantage sees the later
    turns' rewards and values, its last action bootstraps from the next turn's first value. A
    single-turn batch without tools is the plain per-row GAE. values ``[N, T]`` -> (advantages,
    returns) ``[N, T]``, zero where masked.
    """
    m = mask.bool()
    positions = [m[i].nonzero().squeeze(-1) for i in range(m.shape[0])]
    width = max([1, *(sum(len(positions[i]) for i in ep) for ep in episodes)])
    n_ep = len(episodes)
    cat_v = values.new_zeros(n_ep, width)
    cat_r = values.new_zeros(n_ep, width)
    cat_m = torch.zeros(n_ep, width, dtype=torch.bool)
    spans: list[tuple[int, int, int, Tensor]] = []  # (row, episode, offset, the row's action positions)
    for e, ep in enumerate(episodes):
        off = 0
        for i in ep:
            pos = positions[i]
            n = len(pos)
            if n == 0:
                continue
            cat_v[e, off:off + n] = values[i, pos]
            cat_m[e, off:off + n] = True
            cat_r[e, off + n - 1] = rewards[i]
            spans.append((i, e, off, pos))
            off += n
    adv_cat = ADVANTAGE_ESTIMATORS.get("gae")(values.new_zeros(n_ep), None, cat_m, values=cat_v, token_rewards=cat_r,
                                              gamma=gamma, lam=lam)
    _, ret_cat = gae_advantages(cat_r, cat_v, cat_m, gamma, lam)
    adv, ret = torch.zeros_like(values), torch.zeros_like(values)
    for i, e, off, pos in spans:
        adv[i, pos] = adv_cat[e, off:off + len(pos)]
        ret[i, pos] = ret_cat[e, off:off + len(pos)]
    return adv, ret


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var(R - V) / Var(R) over valid tokens (1: perfect critic, 0: no better than the mean).
    values, returns, mask ``[N, T]``."""
    m = mask.bool()
    r, v = returns[m].double(), values[m].double()
    var = float(r.var(unbiased=False)) if r.numel() else 0.0
    return 1.0 - float((r - v).var(unbiased=False)) / var if var > 0 else 0.0


def critic_update(critic: ValueModel, opt: torch.optim.Optimizer, prompts: Sequence[Sequence[int]],
                  responses: Sequence[Sequence[int]], old_values: Tensor, returns: Tensor, mask: Tensor, *,
                  pad_id: int, micro_batch_size: int, clip_range: float, agg: str, max_grad_norm: float,
                  epochs: int = 1, max_length: int | None = None) -> dict[str, float]:
    """`epochs` optimizer steps of PPO's clipped value loss (`clipped_value_loss`) on one batch, micro-
    batched; gradient accumulation weights each micro-batch by its share of the aggregation's units
    (`rl.aggregation_units`), so the gradient is the whole batch's loss whatever the split (give
    ``max_length``, Dr. GRPO's constant, for ``seq-mean-token-sum-norm``). old_values (the rollout's
    values), returns, mask ``[N, T]``. Metrics: ``critic/value_loss`` (before the first step), ``critic/value_loss_last``
    (before the last), ``critic/explained_variance`` of the old values, ``critic/grad_norm``."""
    n = len(responses)
    total = max(1.0, float(aggregation_units(mask, agg)))
    losses: list[float] = []
    gn = torch.zeros(())
    critic.train()
    for _ in range(epochs):
        opt.zero_grad(set_to_none=True)
        epoch_loss = 0.0
        for lo in range(0, n, micro_batch_size):
            idx = list(range(lo, min(n, lo + micro_batch_size)))
            v = response_values(critic, [prompts[i] for i in idx], [responses[i] for i in idx], pad_id=pad_id)
            w = v.shape[1]
            m = mask[idx, :w]
            loss = clipped_value_loss(v, old_values[idx, :w], returns[idx, :w], m, clip_range, agg=agg,
                                      max_length=max_length)
            share = float(aggregation_units(m, agg)) / total
            (loss * share).backward()
            epoch_loss += float(loss.detach()) * share
        gn = torch.nn.utils.clip_grad_norm_(critic.parameters(), max_grad_norm)
        opt.step()
        losses.append(epoch_loss)
    critic.eval()
    return {"critic/value_loss": losses[0] if losses else 0.0, "critic/value_loss_last": losses[-1] if losses else 0.0,
            "critic/explained_variance": explained_variance(old_values, returns, mask),
            "critic/value_mean": float(masked_mean(old_values, mask.bool())) if bool(mask.any()) else 0.0,
            "critic/grad_norm": float(gn)}


class Critic:
    """The trainer's critic: a `ValueModel` copied from `policy`, its own AdamW (``rl.critic_lr``) and the
    settings of its update (``rl.value_clip``, ``rl.loss_agg``, ``rl.micro_batch_size``, ``rl.max_grad_norm``)."""

    def __init__(self, policy: Any, cfg: Any, pad_id: int) -> None:
        self.model = ValueModel.from_policy(policy).eval()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.critic_lr, weight_decay=0.0)
        self.cfg, self.pad_id = cfg, pad_id

    def values(self, samples: Sequence[Any], width: int) -> Tensor:
        """Values ``[N, width]`` of the samples' response tokens (``.prompt_ids``, ``.response_ids``), no gradient."""
        out = torch.zeros(len(samples), width)
        m = self.cfg.micro_batch_size
        with torch.no_grad():
            for lo in range(0, len(samples), m):
                chunk = samples[lo:lo + m]
                v = response_values(self.model, [s.prompt_ids for s in chunk], [s.response_ids for s in chunk],
                                    pad_id=self.pad_id)
                out[lo:lo + len(chunk), : v.shape[1]] = v.cpu()
        return out

    def update(self, samples: Sequence[Any], old_values: Tensor, returns: Tensor, mask: Tensor,
               epochs: int = 1) -> dict[str, float]:
        """`critic_update` on the samples' rows (old_values, returns, mask ``[N, T]``)."""
        c = self.cfg
        return critic_update(self.model, self.opt, [s.prompt_ids for s in samples], [s.response_ids for s in samples],
                             old_values, returns, mask, pad_id=self.pad_id, micro_batch_size=c.micro_batch_size,
                             clip_range=c.value_clip, agg=c.loss_agg, max_grad_norm=c.max_grad_norm, epochs=epochs,
                             max_length=c.max_new_tokens)
