"""KL penalties (Schulman's k1/k2/k3 estimators) and the entropy bonus.

Tokens are sampled from the current policy pi; with ``log r = log pi_ref - log pi`` each estimator
is a per-token estimate of ``KL(pi || pi_ref)`` (J. Schulman, "Approximating KL Divergence", 2020):

- k1 = ``-log r`` (unbiased, high variance, can be negative);
- k2 = ``(log r)^2 / 2`` (biased, low variance, >= 0);
- k3 = ``(r - 1) - log r`` (unbiased, low variance, >= 0; DeepSeekMath Eq. 4).
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernelrl.rl.aggregation import aggregate_loss
from kernelrl.rl.masked import zero_masked
from kernelrl.rl.registries import KL_PENALTIES

#: ``log r`` is clamped to this magnitude before `exp` in k3.
MAX_LOG_RATIO = 20.0


@KL_PENALTIES.register("k1", "kl")
def kl_k1(log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor) -> Tensor:
    """k1 = ``log pi - log pi_ref`` per token; ``[B, T] -> [B, T]``, zero where masked."""
    return zero_masked(log_prob - ref_log_prob, response_mask)


@KL_PENALTIES.register("k2", "mse")
def kl_k2(log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor) -> Tensor:
    """k2 = ``(log pi - log pi_ref)^2 / 2`` per token; ``[B, T] -> [B, T]``, zero where masked."""
    d = zero_masked(log_prob - ref_log_prob, response_mask)
    return 0.5 * d * d


@KL_PENALTIES.register("k3", "low_var_kl")
def kl_k3(log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor) -> Tensor:
    """k3 = ``exp(log r) - 1 - log r`` with ``log r = log pi_ref - log pi`` clamped to ±20.

    ``[B, T] -> [B, T]``, >= 0, zero where masked (DeepSeekMath Eq. 4).
    """
    lr = zero_masked(ref_log_prob - log_prob, response_mask).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return zero_masked(torch.expm1(lr) - lr, response_mask)


def kl_exact(log_p: Tensor, log_q: Tensor, response_mask: Tensor) -> Tensor:
    """Exact per-position ``KL(p || q) = sum_v p(v) (log p(v) - log q(v))`` from full log-prob
    vectors ``[B, T, V]`` -> ``[B, T]``, zero where masked (no sampling noise; for diagnostics)."""
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    return zero_masked(kl, response_mask)


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL estimate of the named kind (``k1``, ``k2``, ``k3``); ``[B, T] -> [B, T]``."""
    return KL_PENALTIES.get(kind)(log_prob, ref_log_prob, response_mask)


def kl_loss(
    log_prob: Tensor,
    ref_log_prob: Tensor,
    response_mask: Tensor,
    *,
    kind: str = "k3",
    agg: str = "token-mean",
    max_length: int | None = None,
) -> Tensor:
    """KL regulariser as a loss term (GRPO-style, added to the policy loss times a coefficient).

    ``[B, T]`` inputs -> scalar ``agg(kl_penalty(...))``.
    """
    return aggregate_loss(kl_penalty(log_prob, ref_log_prob, response_mask, kind), response_mask, agg,
                          max_length=max_length)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax over the last dim: ``[..., V] -> [...]``.

    ``H = logsumexp(z) - sum_v softmax(z)_v z_v``.
    """
    log_z = torch.logsumexp(logits, dim=-1)
    return log_z - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


def entropy_bonus(
    entropy: Tensor,
    response_mask: Tensor,
    *,
    coef: float,
    agg: str = "token-mean",
    max_length: int | None = None,
) -> Tensor:
    """Entropy bonus as a loss term to add: ``-coef * agg(H)``; entropy ``[B, T]`` -> scalar."""
    return -coef * aggregate_loss(zero_masked(entropy, response_mask), response_mask, agg, max_length=max_length)
