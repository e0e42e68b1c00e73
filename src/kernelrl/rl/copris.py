"""CoPRIS: concurrency-controlled partial rollout with importance sampling.

A response may be generated across several stages, each by a different policy version (a
partial rollout is paused at a weight update and resumed later). Training must use, for each
token, the log-prob of the version that actually generated it ("cross-stage" behaviour
log-probs); the ratio against the current policy then corrects the off-policyness per token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from kernelrl.rl.masked import as_bool_mask, masked_mean, zero_masked

MAX_LOG_RATIO = 20.0


class Stitched(NamedTuple):
    """Behaviour log-probs ``[B, T']``, lengths ``[B]`` and generating versions ``[B, T']`` (-1 = none)."""

    log_probs: Tensor
    lengths: Tensor
    versions: Tensor


def lengths_to_mask(lengths: Tensor, width: int) -> Tensor:
    """``[B]`` lengths -> ``[B, width]`` bool mask of the first ``lengths[i]`` positions."""
    return torch.arange(width, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(-1)


def append_suffix_log_probs(
    log_probs: Tensor,
    lengths: Tensor,
    suffix_log_probs: Tensor,
    suffix_lengths: Tensor,
    *,
    version: int,
    versions: Tensor | None = None,
) -> Stitched:
    """Cross-stage log-prob stitching: append only the newly generated suffix of each response.

    Row i keeps its first ``lengths[i]`` log-probs (and the versions that produced them) and gets
    ``suffix_log_probs[i, :suffix_lengths[i]]`` written at positions ``lengths[i] ...`` tagged with
    ``version``. Earlier tokens are never re-scored by the newer policy. One scatter, no loop.

    log_probs ``[B, T]``, lengths ``[B]``, suffix_log_probs ``[B, S]`` (left-aligned),
    suffix_lengths ``[B]``, versions ``[B, T]`` or None (kept prefix tagged -1, unknown)
    -> `Stitched` with width ``T' = max(T, max(lengths + suffix_lengths))``; positions past the new
    lengths hold log-prob 0 and version -1.
    """
    b, t = log_probs.shape
    s = suffix_log_probs.shape[-1]
    new_lengths = lengths + suffix_lengths
    width = max(t, int(new_lengths.max().item()) if b else 0)
    old_valid = lengths_to_mask(lengths, t)
    out = log_probs.new_zeros(b, width)
    out[:, :t] = zero_masked(log_probs, old_valid)
    ver = torch.full((b, width), -1, dtype=torch.long, device=log_probs.device)
    prev = torch.full_like(ver[:, :t], -1) if versions is None else versions.to(torch.long)
    ver[:, :t] = torch.where(old_valid, prev, torch.full_like(prev, -1))
    j = torch.arange(s, device=log_probs.device).unsqueeze(0)
    new_valid = j < suffix_lengths.unsqueeze(-1)
    rows = torch.arange(b, device=log_probs.device).unsqueeze(-1).expand(b, s)[new_valid]
    cols = (lengths.unsqueeze(-1) + j)[new_valid]
    out[rows, cols] = suffix_log_probs[new_valid].to(out.dtype)
    ver[rows, cols] = version
    return Stitched(out, new_lengths, ver)


class StitchedRatio(NamedTuple):
    """Per-token ratio ``[B, T]`` (zero where masked) and detached metrics."""

    ratio: Tensor
    metrics: dict[str, Tensor]


def stitched_importance_ratio(
    current_log_probs: Tensor,
    behaviour_log_probs: Tensor,
    response_mask: Tensor,
    *,
    clip: float | None = None,
    versions: Tensor | None = None,
    current_version: int | None = None,
) -> StitchedRatio:
    """Per-token importance ratio against the current policy for stitched trajectories (CoPRIS).

    ``rho_t = pi_theta(a_t) / pi_{v(t)}(a_t)`` where ``pi_{v(t)}`` is the version that generated
    token t (``behaviour_log_probs`` from `append_suffix_log_probs`); optionally truncated at
    ``clip`` (no gradient flows through truncated tokens). The ratio keeps the gradient of
    ``current_log_probs``.

    current_log_probs, behaviour_log_probs, response_mask ``[B, T]``; versions ``[B, T]`` with
    ``current_version`` add staleness metrics -> `StitchedRatio`.
    """
    mask = as_bool_mask(response_mask)
    lr = zero_masked((current_log_probs - behaviour_log_probs.detach()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO), mask)
    ratio = torch.exp(lr)
    if clip is not None:
        ratio = ratio.clamp(max=clip)
    ratio = zero_masked(ratio, mask)
    with torch.no_grad():
        ratio_max = ratio.amax() if ratio.numel() else ratio.new_zeros(())
        metrics = {"ratio_mean": masked_mean(ratio, mask), "ratio_max": ratio_max}
        if versions is not None and current_version is not None:
            lag = (current_version - versions).to(ratio.dtype)
            metrics["version_lag_mean"] = masked_mean(lag, mask)
            metrics["stale_token_frac"] = masked_mean((lag > 0).to(ratio.dtype), mask)
    return StitchedRatio(ratio, metrics)
