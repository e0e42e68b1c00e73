"""Rollout/trainer mismatch correction (importance sampling between two engines' log-probs).

The rollout engine (e.g. vLLM) samples with ``pi_rollout`` while the trainer computes
``pi_train`` for the same weights; the two differ numerically, so the update is slightly
off-policy (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
Training"). Per token ``rho_t = pi_train / pi_rollout``; per sequence ``rho = prod_t rho_t``.

Every correction takes ``train_log_prob, rollout_log_prob, response_mask`` (``[B, T]``) and returns
a `Correction`: ``weights [B, T]`` (detached, multiply the per-token loss), ``mask [B, T]`` (bool,
tokens that still count) and ``metrics`` (detached 0-dim tensors, keys prefixed by the method).
Weights are zero wherever the mask is false.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from kernelrl.rl.masked import as_bool_mask, masked_mean, masked_sum, zero_masked
from kernelrl.rl.registries import MISMATCH_CORRECTIONS

MAX_LOG_RATIO = 20.0


class Correction(NamedTuple):
    """Importance weights ``[B, T]``, the kept-token mask ``[B, T]`` and detached metrics."""

    weights: Tensor
    mask: Tensor
    metrics: dict[str, Tensor]


def _token_log_ratio(train_log_prob: Tensor, rollout_log_prob: Tensor, mask: Tensor) -> Tensor:
    return zero_masked((train_log_prob - rollout_log_prob).detach(), mask).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _metrics(name: str, log_ratio: Tensor, mask: Tensor, kept: Tensor, weights: Tensor) -> dict[str, Tensor]:
    """Shared diagnostics: mismatch size (mean ratio, k3 KL(rollout || train)) and what was dropped."""
    f = log_ratio.dtype
    rows = mask.any(-1)
    kept_rows = (kept & mask).any(-1)
    n_rows = rows.sum().to(f).clamp_min(1)
    ratio = torch.exp(log_ratio)
    return {
        f"{name}/ratio_mean": masked_mean(ratio, mask),
        f"{name}/kl_k3": masked_mean(torch.expm1(log_ratio) - log_ratio, mask),
        f"{name}/masked_token_frac": masked_mean((mask & ~kept).to(f), mask),
        f"{name}/masked_seq_frac": (rows & ~kept_rows).sum().to(f) / n_rows,
        f"{name}/weight_mean": masked_mean(weights, mask & kept),
    }


def _finish(name: str, lr: Tensor, mask: Tensor, kept: Tensor, weights: Tensor,
            extra: dict[str, Tensor] | None = None) -> Correction:
    kept = kept & mask
    weights = zero_masked(weights, kept).detach()
    metrics = _metrics(name, lr, mask, kept, weights)
    if extra:
        metrics.update(extra)
    return Correction(weights, kept, metrics)


@MISMATCH_CORRECTIONS.register("token_tis")
def token_tis(train_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, *,
              upper: float = 2.0) -> Correction:
    """Token-level truncated IS (Yao et al. 2025): ``w_t = min(rho_t, upper)``; mask unchanged."""
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    w = torch.exp(lr.clamp(max=_log(upper)))
    clipped = masked_mean((lr > _log(upper)).to(lr.dtype), mask)
    return _finish("token_tis", lr, mask, mask, w, {"token_tis/clipped_frac": clipped})


@MISMATCH_CORRECTIONS.register("seq_tis", "sequence_tis")
def sequence_tis(train_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, *,
                 upper: float = 2.0) -> Correction:
    """Sequence-level truncated IS: ``w_i = min(prod_t rho_t, upper)`` on each valid token of i."""
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    seq = masked_sum(lr, mask, -1)
    w = torch.exp(seq.clamp(max=_log(upper))).unsqueeze(-1).expand_as(lr)
    f = lr.dtype
    clipped = ((seq > _log(upper)) & mask.any(-1)).sum().to(f) / mask.any(-1).sum().to(f).clamp_min(1)
    return _finish("seq_tis", lr, mask, mask, w, {"seq_tis/clipped_seq_frac": clipped})


@MISMATCH_CORRECTIONS.register("token_mis")
def token_mis(train_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, *,
              upper: float = 2.0, lower: float = 0.0) -> Correction:
    """Token-level masked IS (Yao et al. 2025): keep tokens with ``lower <= rho_t <= upper``,
    weight ``w_t = rho_t``; tokens outside the bounds are masked out."""
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    kept = (lr <= _log(upper)) & (lr >= _log(lower))
    return _finish("token_mis", lr, mask, kept, torch.exp(lr))


@MISMATCH_CORRECTIONS.register("seq_mis", "sequence_mis")
def sequence_mis(train_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, *,
                 upper: float = 2.0, lower: float = 0.0) -> Correction:
    """Sequence-level masked IS: keep whole sequences with ``lower <= prod_t rho_t <= upper``,
    weight ``w_i = prod_t rho_t`` on their tokens; others are masked out."""
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    seq = masked_sum(lr, mask, -1)
    kept_seq = (seq <= _log(upper)) & (seq >= _log(lower))
    w = torch.exp(seq.clamp(max=_log(upper))).unsqueeze(-1).expand_as(lr)
    return _finish("seq_mis", lr, mask, kept_seq.unsqueeze(-1).expand_as(mask), w)


@MISMATCH_CORRECTIONS.register("geo_rs", "geometric_rejection")
def geometric_rejection(train_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, *,
                        lower: float = 0.999, upper: float = 1.001) -> Correction:
    """Geometric-mean rejection sampling: per sequence ``g_i = exp(mean_t log rho_t)``; sequences
    with ``g_i`` outside ``[lower, upper]`` are masked out, kept ones get weight 1.

    Length-normalised, so long sequences are not rejected just for being long (unlike the
    product ratio of `sequence_mis`).
    """
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    geo = masked_mean(lr, mask, -1)
    kept_seq = (geo >= _log(lower)) & (geo <= _log(upper))
    extra = {"geo_rs/geo_mean": masked_mean(torch.exp(geo), mask.any(-1))}
    return _finish("geo_rs", lr, mask, kept_seq.unsqueeze(-1).expand_as(mask), torch.ones_like(lr), extra)


@MISMATCH_CORRECTIONS.register("token_veto")
def token_veto(train_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, *,
               threshold: float = 1e-4) -> Correction:
    """Token veto: a sequence with any valid token ``rho_t < threshold`` is masked out entirely
    (catastrophic per-token mismatch); kept sequences get weight 1."""
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    vetoed = ((lr < _log(threshold)) & mask).any(-1)
    return _finish("token_veto", lr, mask, (~vetoed).unsqueeze(-1).expand_as(mask), torch.ones_like(lr))


def combine_corrections(*corrections: Correction) -> Correction:
    """Apply several corrections together: weights multiply, masks AND, metrics merge.

    Each input: ``weights [B, T]``, ``mask [B, T]``; the result has the same shapes.
    """
    if not corrections:
        raise ValueError("need at least one correction")
    weights, mask, metrics = corrections[0].weights, corrections[0].mask, dict(corrections[0].metrics)
    for c in corrections[1:]:
        weights = weights * c.weights
        mask = mask & c.mask
        metrics.update(c.metrics)
    return Correction(zero_masked(weights, mask), mask, metrics)

