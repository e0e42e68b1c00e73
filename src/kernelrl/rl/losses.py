"""Policy losses: PPO clip with separate low/high bounds (clip-higher) and dual clip."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from kernelrl.rl.aggregation import aggregate_loss
from kernelrl.rl.masked import as_bool_mask, masked_mean, zero_masked
from kernelrl.rl.registries import POLICY_LOSSES

#: log-ratios are clamped to this magnitude before `exp` so a garbage log-prob cannot overflow.
MAX_LOG_RATIO = 20.0


class LossOutput(NamedTuple):
    """A scalar loss to minimise and detached scalar metrics (0-dim tensors, no host sync)."""

    loss: Tensor
    metrics: dict[str, Tensor]


def log_ratio(log_prob: Tensor, old_log_prob: Tensor, mask: Tensor) -> Tensor:
    """``log pi / pi_old`` clamped to ``±MAX_LOG_RATIO``, zero where masked; ``[B, T]``."""
    return zero_masked((log_prob - old_log_prob).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO), mask)


def ppo_clip_token_loss(
    ratio: Tensor,
    advantages: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    dual_clip: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-element clipped surrogate loss (any shape); returns (loss, clipped, dual_clipped).

    ``l = max(-A rho, -A clip(rho, 1 - clip_low, 1 + clip_high))`` (PPO, Schulman et al. 2017,
    Eq. 7, with DAPO's decoupled clip-higher bounds). With ``dual_clip = c > 1`` (Ye et al. 2020,
    dual-clip PPO) negative advantages are further bounded: ``l = min(l, -c A)`` for ``A < 0``.
    ``clipped`` marks elements where the clipped branch is the one taken.
    """
    high = clip_low if clip_high is None else clip_high
    unclipped = -advantages * ratio
    clipped_loss = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + high)
    loss = torch.maximum(unclipped, clipped_loss)
    clipped = clipped_loss > unclipped
    dual = torch.zeros_like(clipped)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError("dual_clip must be > 1")
        bound = -dual_clip * advantages
        dual = (advantages < 0) & (loss > bound)
        loss = torch.where(dual, bound, loss)
    return loss, clipped, dual


@POLICY_LOSSES.register("ppo", "ppo_clip")
def ppo_clip_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    dual_clip: float | None = None,
    agg: str = "token-mean",
    max_length: int | None = None,
    weights: Tensor | None = None,
) -> LossOutput:
    """PPO clipped policy loss with clip-higher and dual clip, aggregated by ``agg``.

    Per token ``rho = exp(log pi - log pi_old)`` and the loss of `ppo_clip_token_loss`
    (PPO Eq. 7; clip-higher: DAPO, Yu et al. 2025; dual clip: Ye et al. 2020). Optional
    ``weights [B, T]`` (e.g. truncated importance weights from `kernelrl.rl.mismatch`) multiply the
    per-token loss; they, ``old_log_prob`` and ``advantages`` are treated as constants.

    log_prob, old_log_prob, advantages, response_mask: ``[B, T]`` -> `LossOutput` with metrics
    ``clip_frac``, ``clip_frac_low``, ``clip_frac_high``, ``dual_clip_frac``, ``approx_kl``
    (k1 of old vs new), ``ratio_mean``.
    """
    mask = as_bool_mask(response_mask)
    lr = log_ratio(log_prob, old_log_prob.detach(), mask)
    ratio = torch.exp(lr)
    adv = zero_masked(advantages.detach(), mask)
    token_loss, clipped, dual = ppo_clip_token_loss(ratio, adv, clip_low=clip_low, clip_high=clip_high,
                                                    dual_clip=dual_clip)
    if weights is not None:
        token_loss = token_loss * zero_masked(weights, mask).detach()
    loss = aggregate_loss(zero_masked(token_loss, mask), mask, agg, max_length=max_length)
    with torch.no_grad():
        f = ratio.dtype
        metrics = {
            "clip_frac": masked_mean((clipped & mask).to(f), mask),
            "clip_frac_low": masked_mean((clipped & mask & (adv < 0)).to(f), mask),
            "clip_frac_high": masked_mean((clipped & mask & (adv > 0)).to(f), mask),
            "dual_clip_frac": masked_mean((dual & mask).to(f), mask),
            "approx_kl": masked_mean(-lr, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return LossOutput(loss, metrics)
