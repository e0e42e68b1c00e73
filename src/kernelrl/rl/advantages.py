"""Outcome-reward advantage estimators: GRPO, Dr. GRPO, RLOO, REINFORCE++ and TRLOO (multi-turn).

Every estimator: ``rewards [B]``, ``group_ids [B]`` (samples of one prompt share an id),
``response_mask [B, T]`` -> advantages ``[B, T]`` (zero where masked). Per-group statistics are
scatter/index ops over the whole batch (see `kernelrl.rl.groups`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernelrl.rl.groups import group_index, group_mean_std, leave_one_out_mean
from kernelrl.rl.masked import (
    add_at_last_token_,
    as_bool_mask,
    broadcast_to_tokens,
    reverse_cumsum_,
    whiten_,
    zero_masked,
)
from kernelrl.rl.registries import ADVANTAGE_ESTIMATORS, declare_inputs


def _check(rewards: Tensor, group_ids: Tensor | None, response_mask: Tensor) -> None:
    if rewards.dim() != 1 or response_mask.dim() != 2 or rewards.shape[0] != response_mask.shape[0]:
        raise ValueError(f"want rewards [B] and response_mask [B, T]; got {tuple(rewards.shape)} and "
                         f"{tuple(response_mask.shape)}")
    if group_ids is not None and group_ids.shape != rewards.shape:
        raise ValueError(f"group_ids must be [B]; got {tuple(group_ids.shape)}")


def grpo_sequence_advantages(
    rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, norm_by_std: bool = True
) -> Tensor:
    """Per-sample GRPO advantage ``(r_i - mean_g) / (std_g + eps)``: rewards, group_ids ``[B]`` -> ``[B]``.

    See `grpo_advantages`; useful when the loss broadcasts a sequence-level advantage itself.
    """
    mean, std = group_mean_std(rewards, group_index(group_ids))
    adv = rewards - mean
    if norm_by_std:
        denom = std + eps
        # a group whose rewards all agree (or a group of one) has adv 0 even with eps = 0
        adv = torch.where(denom > 0, adv / torch.where(denom > 0, denom, torch.ones_like(denom)),
                          torch.zeros_like(adv))
    return adv


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(
    rewards: Tensor, group_ids: Tensor, response_mask: Tensor, *, eps: float = 1e-6, norm_by_std: bool = True
) -> Tensor:
    """GRPO outcome advantage (DeepSeekMath, Shao et al. 2024, §4.1.2 outcome supervision).

    ``A_{i,t} = (r_i - mean_g(r)) / (std_g(r) + eps)`` for every valid token t of sample i, where
    mean/std run over the group of sample i (std with Bessel's correction; a group of one, or
    one whose rewards all agree, gets advantage 0). ``norm_by_std=False`` gives Dr. GRPO.

    rewards ``[B]``, group_ids ``[B]``, response_mask ``[B, T]`` -> ``[B, T]``.
    """
    _check(rewards, group_ids, response_mask)
    adv = grpo_sequence_advantages(rewards, group_ids, eps=eps, norm_by_std=norm_by_std)
    return broadcast_to_tokens(adv, response_mask)


@ADVANTAGE_ESTIMATORS.register("drgrpo", "dr_grpo")
def drgrpo_advantages(rewards: Tensor, group_ids: Tensor, response_mask: Tensor) -> Tensor:
    """Dr. GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective").

    ``A_{i,t} = r_i - mean_g(r)``: GRPO without the std division (the length bias is removed by
    the ``seq-mean-token-sum-norm`` loss aggregation). rewards ``[B]``, group_ids ``[B]``,
    response_mask ``[B, T]`` -> ``[B, T]``.
    """
    return grpo_advantages(rewards, group_ids, response_mask, norm_by_std=False)


def rloo_sequence_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Per-sample RLOO advantage ``r_i - mean of the others``: ``[B] -> [B]`` (see `rloo_advantages`)."""
    return rewards - leave_one_out_mean(rewards, group_index(group_ids))


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo_advantages(rewards: Tensor, group_ids: Tensor, response_mask: Tensor) -> Tensor:
    """RLOO advantage (Ahmadian et al. 2024, "Back to Basics", leave-one-out REINFORCE).

    ``A_i = r_i - 1/(k-1) * sum_{j != i} r_j`` over the k samples of the group, on every valid
    token; a group of one keeps ``A_i = r_i`` (no baseline). Sums to zero over each group of two
    or more. rewards ``[B]``, group_ids ``[B]``, response_mask ``[B, T]`` -> ``[B, T]``.
    """
    _check(rewards, group_ids, response_mask)
    return broadcast_to_tokens(rloo_sequence_advantages(rewards, group_ids), response_mask)


@ADVANTAGE_ESTIMATORS.register("reinforce++", "reinforce_plus_plus")
def reinforce_pp_advantages(
    rewards: Tensor,
    group_ids: Tensor | None,
    response_mask: Tensor,
    *,
    token_kl: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    group_baseline: bool = False,
    eps: float = 1e-8,
) -> Tensor:
    """REINFORCE++ advantage (Hu 2025, "REINFORCE++"), global batch normalisation.

    Token rewards ``r_t = 1[t = last] * r - kl_coef * KL_t``; returns
    ``G_t = sum_{s >= t} gamma^(s-t) r_s`` over valid tokens; advantages are the returns whitened
    over every valid token of the batch, ``(G - mean) / sqrt(var + eps)``. With
    ``group_baseline`` (REINFORCE++-baseline) the group mean is first subtracted from ``r``.

    rewards ``[B]``, group_ids ``[B]`` (only read with ``group_baseline``), response_mask
    ``[B, T]``, token_kl ``[B, T]`` or None -> ``[B, T]``.
    """
    _check(rewards, group_ids, response_mask)
    mask = as_bool_mask(response_mask)
    if group_baseline:
        if group_ids is None:
            raise ValueError("group_baseline needs group_ids")
        rewards = rewards - group_mean_std(rewards, group_index(group_ids))[0]
    with_kl = token_kl is not None and kl_coef != 0.0
    if gamma == 1.0:
        # undiscounted: every valid token is at or before the last one, so each return holds the
        # whole outcome reward plus the KL penalties still ahead: G_t = r - kl_coef * sum_{s>=t} KL_s
        outcome = rewards.unsqueeze(-1)
        if with_kl:
            assert token_kl is not None
            kl_ahead = reverse_cumsum_(zero_masked(token_kl.to(rewards.dtype), mask), mask, fill=False)
            returns = torch.add(outcome, kl_ahead, alpha=-kl_coef, out=kl_ahead)
        else:
            returns = outcome.expand(mask.shape).clone()
        return whiten_(returns.masked_fill_(~mask, 0), mask, eps=eps)
    if with_kl:
        assert token_kl is not None
        token_rewards = zero_masked(token_kl.to(rewards.dtype), mask).mul_(-kl_coef)
    else:
        token_rewards = torch.zeros(mask.shape, dtype=rewards.dtype, device=rewards.device)
    add_at_last_token_(token_rewards, rewards, mask)
    return whiten_(reverse_cumsum_(token_rewards, mask, gamma), mask, eps=eps)


@ADVANTAGE_ESTIMATORS.register("reinforce++-baseline", "reinforce_plus_plus_baseline")
def reinforce_pp_baseline_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    response_mask: Tensor,
    *,
    token_kl: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    eps: float = 1e-8,
) -> Tensor:
    """REINFORCE++-baseline (Hu 2025): `reinforce_pp_advantages` with the group mean subtracted
    from each outcome reward before the global whitening. Shapes as there."""
    return reinforce_pp_advantages(rewards, group_ids, response_mask, token_kl=token_kl, kl_coef=kl_coef,
                                   gamma=gamma, group_baseline=True, eps=eps)


def episode_returns(rewards: Tensor, episode_ids: Tensor, turn_index: Tensor, gamma: float = 1.0) -> Tensor:
    """Per-turn discounted returns within each episode: ``G_t = r_t + gamma * G_{t+1}``.

    rewards, episode_ids, turn_index: ``[N]`` (one entry per turn, any order); "next turn" is the
    next larger ``turn_index`` of the same episode. A (episode, turn_index) pair may occur once.
    Vectorised: turns are laid out as a dense ``[episodes, max_turns]`` matrix and multiplied by
    the upper-triangular discount matrix ``D[j, t] = gamma^(j-t)`` (j >= t). Returns ``[N]``.
    """
    if rewards.numel() == 0:
        return rewards.clone()
    ep = group_index(episode_ids)
    span = int(turn_index.max().item()) - int(turn_index.min().item()) + 1
    key = ep.inverse * span + (turn_index - turn_index.min())
    order = torch.argsort(key)
    sorted_key = key[order]
    if bool((sorted_key[1:] == sorted_key[:-1]).any()):
        raise ValueError("a (episode, turn_index) pair occurs more than once")
    sorted_ep = ep.inverse[order]
    pos = torch.arange(order.numel(), device=order.device)
    start = torch.full((ep.num_groups,), order.numel(), dtype=pos.dtype, device=pos.device)
    start = start.scatter_reduce(0, sorted_ep, pos, reduce="amin")
    rank = pos - start[sorted_ep]
    width = int(rank.max().item()) + 1
    dense = rewards.new_zeros(ep.num_groups, width)
    dense[sorted_ep, rank] = rewards[order]
    j = torch.arange(width, device=rewards.device)
    steps = (j.unsqueeze(1) - j.unsqueeze(0)).to(rewards.dtype)  # steps[j, t] = j - t
    discount = torch.where(steps >= 0, torch.as_tensor(gamma, dtype=rewards.dtype) ** steps.clamp_min(0),
                           torch.zeros_like(steps))
    returns_dense = dense @ discount
    out = torch.empty_like(rewards)
    out[order] = returns_dense[sorted_ep, rank]
    return out


@ADVANTAGE_ESTIMATORS.register("trloo")
@declare_inputs(episodes=True)
def trloo_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    response_mask: Tensor,
    *,
    turn_index: Tensor,
    episode_ids: Tensor,
    counts: Tensor | None = None,
    gamma: float = 1.0,
) -> Tensor:
    """TRLOO, turn-level leave-one-out advantages for multi-turn episodes (Dr. Kernel / KernelGYM).

    One row per turn. Returns ``G_t = r_t + gamma * G_{t+1}`` within each episode (every turn's
    reward enters the returns). Groups are keyed by (prompt id, turn index) over the turns whose
    ``counts`` is true; ``A_{i,t} = G_{i,t} - 1/(n-1) sum_{j != i} G_{j,t}`` over the n members,
    and a group of one keeps ``A = G``. Turns that do not count get ``A = 0``. The advantage is
    copied onto the turn's valid tokens.

    rewards ``[N]``, group_ids (prompt ids) ``[N]``, response_mask ``[N, T]``, turn_index ``[N]``,
    episode_ids ``[N]``, counts ``[N]`` bool or None (all count) -> ``[N, T]``.
    """
    _check(rewards, group_ids, response_mask)
    returns = episode_returns(rewards, episode_ids, turn_index, gamma)
    prompt = group_index(group_ids)
    turn = turn_index - turn_index.min()
    key = prompt.inverse * (int(turn.max().item()) + 1 if turn.numel() else 1) + turn
    index = group_index(key)
    valid = torch.ones_like(rewards, dtype=torch.bool) if counts is None else as_bool_mask(counts)
    adv = torch.where(valid, returns - leave_one_out_mean(returns, index, valid), torch.zeros_like(returns))
    return broadcast_to_tokens(adv, response_mask)
