"""Rollout/trainer mismatch correction (importance sampling between two engines' log-probs).

The rollout engine (e.g. vLLM) samples with ``pi_rollout`` while the trainer computes
``pi_train`` for the same weights; the two differ numerically, so the update is slightly
off-policy (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
Training"). Per token ``rho_t = pi_train / pi_rollout``; per sequence ``rho = prod_t rho_t``.

Every correction takes ``train_log_prob, rollout_log_prob, response_mask`` (``[B, T]``) and returns
a `Correction`: ``weights [B, T]`` (detached, multiply the per-token loss), ``mask [B, T]`` (bool,
tokens that still count) and ``metrics`` (detached 0-dim tensors, keys prefixed by the method).
Weights are zero wherever the mask is false.

Safety clamp (as in verl's and KernelGYM's rollout-correction code): per-token modes clamp each
token's ``log rho_t`` to ``±MAX_LOG_RATIO`` before ``exp``; sequence-level modes clamp the
aggregate (the sum ``log prod_t rho_t``, or the mean for the geometric mode), never the tokens, so
one catastrophic token (``log rho_t = -40``) is not capped at -20 and then cancelled by many small
positive ones. Accept / reject decisions compare the exact aggregate with the bounds in log space;
the clamp only guards ``exp``.

Several corrections compose (`combine_corrections`, `apply_corrections`): weights multiply and
masks AND, e.g. geometric rejection (a sequence mask) with token TIS (token weights).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

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


#: an infinite token log-ratio (a token one engine gives probability 0) is taken as this finite value,
#: so a sequence holding both a ``+inf`` and a ``-inf`` token sums to a clamped number, not NaN.
INF_LOG_RATIO = 1e4


def _raw_log_ratio(train_log_prob: Tensor, rollout_log_prob: Tensor, mask: Tensor) -> Tensor:
    """Exact per-token ``log rho_t`` (detached, ``±inf`` -> ``±INF_LOG_RATIO``), zero where masked."""
    lr = (train_log_prob - rollout_log_prob).detach()
    lr = torch.nan_to_num(lr, nan=math.nan, posinf=INF_LOG_RATIO, neginf=-INF_LOG_RATIO)
    return zero_masked(lr, mask)


def _token_log_ratio(train_log_prob: Tensor, rollout_log_prob: Tensor, mask: Tensor) -> Tensor:
    """Per-token ``log rho_t`` clamped to ``±MAX_LOG_RATIO`` (for per-token weights and metrics)."""
    return _raw_log_ratio(train_log_prob, rollout_log_prob, mask).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def _safe(log_value: Tensor) -> Tensor:
    """An aggregate log-ratio clamped to ``±MAX_LOG_RATIO`` before ``exp``."""
    return log_value.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


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
    """Sequence-level truncated IS (Yao et al. 2025): ``w_i = min(prod_t rho_t, upper)`` on each valid
    token of i, computed as ``exp(min(clamp(sum_t log rho_t, ±20), log upper))``: the sum is clamped,
    not its tokens."""
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    seq = masked_sum(_raw_log_ratio(train_log_prob, rollout_log_prob, mask), mask, -1)
    w = torch.exp(_safe(seq).clamp(max=_log(upper))).unsqueeze(-1).expand_as(lr)
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
    """Sequence-level masked IS (Yao et al. 2025): keep whole sequences with
    ``lower <= prod_t rho_t <= upper`` (decided on the exact ``sum_t log rho_t``), weight
    ``w_i = prod_t rho_t = exp(clamp(sum_t log rho_t, ±20))`` on their tokens; others are masked out."""
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    seq = masked_sum(_raw_log_ratio(train_log_prob, rollout_log_prob, mask), mask, -1)
    kept_seq = (seq <= _log(upper)) & (seq >= _log(lower))
    w = torch.exp(_safe(seq).clamp(max=_log(upper))).unsqueeze(-1).expand_as(lr)
    return _finish("seq_mis", lr, mask, kept_seq.unsqueeze(-1).expand_as(mask), w)


@MISMATCH_CORRECTIONS.register("geo_rs", "geometric_rejection")
def geometric_rejection(train_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, *,
                        lower: float = 0.999, upper: float = 1.001) -> Correction:
    """Geometric-mean rejection sampling (Liu, Li et al. 2025, "When Speed Kills Stability", geometric
    RS; verl's ``rollout_rs=geometric``): per sequence ``g_i = exp(mean_t log rho_t)`` over its
    valid tokens; sequences with ``g_i`` outside ``[lower, upper]`` are masked out, kept ones get
    weight 1. The mean is taken over the exact token log-ratios (clamped only before ``exp``).

    Length-normalised, so long sequences are not rejected just for being long (unlike the
    product ratio of `sequence_mis`).
    """
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    geo = masked_mean(_raw_log_ratio(train_log_prob, rollout_log_prob, mask), mask, -1)
    kept_seq = (geo >= _log(lower)) & (geo <= _log(upper))
    extra = {"geo_rs/geo_mean": masked_mean(torch.exp(_safe(geo)), mask.any(-1))}
    return _finish("geo_rs", lr, mask, kept_seq.unsqueeze(-1).expand_as(mask), torch.ones_like(lr), extra)


@MISMATCH_CORRECTIONS.register("token_veto")
def token_veto(train_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, *,
               threshold: float = 1e-4) -> Correction:
    """Token veto (verl's ``rollout_token_veto_threshold``): a sequence with any valid token
    ``rho_t < threshold`` is masked out entirely (catastrophic per-token mismatch); kept sequences
    get weight 1. Compared on the exact ``log rho_t``, so thresholds below ``e^-20`` work too."""
    mask = as_bool_mask(response_mask)
    lr = _token_log_ratio(train_log_prob, rollout_log_prob, mask)
    vetoed = ((_raw_log_ratio(train_log_prob, rollout_log_prob, mask) < _log(threshold)) & mask).any(-1)
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


#: one correction to apply: a registered name, or ``(name, options)``.
CorrectionSpec = str | tuple[str, Mapping[str, Any]]


def apply_corrections(specs: Iterable[CorrectionSpec], train_log_prob: Tensor, rollout_log_prob: Tensor,
                      response_mask: Tensor) -> Correction:
    """Run each named correction (`MISMATCH_CORRECTIONS`) with its options and `combine_corrections`
    the results: e.g. ``[("geo_rs", {"lower": 0.999}), "token_veto"]`` = the geometric sequence mask
    AND the veto mask, weights multiplied. Shapes as for a single correction (``[B, T]``)."""
    out = []
    for spec in specs:
        name, options = (spec, {}) if isinstance(spec, str) else spec
        out.append(MISMATCH_CORRECTIONS.get(name)(train_log_prob, rollout_log_prob, response_mask, **options))
    return combine_corrections(*out)
