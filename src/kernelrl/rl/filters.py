"""Batch filters and length shaping: dynamic sampling, accuracy-range filter, overlong penalty.

Filters take ``rewards [B]`` and ``group_ids [B]`` and return a keep mask ``[B]`` (bool) that is
constant within each group (whole groups are kept or dropped).
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernelrl.rl.groups import group_index, group_sum_count
from kernelrl.rl.registries import SAMPLE_FILTERS


@SAMPLE_FILTERS.register("zero_variance", "dynamic_sampling")
def zero_variance_filter(rewards: Tensor, group_ids: Tensor, *, eps: float = 0.0) -> Tensor:
    """Dynamic sampling (DAPO, Yu et al. 2025): drop groups whose rewards all agree.

    Keeps a group when ``max_g(r) - min_g(r) > eps``; a group of one is dropped (its
    group-relative advantage is zero). rewards ``[B]``, group_ids ``[B]`` -> keep ``[B]`` bool.
    """
    index = group_index(group_ids)
    inf = torch.full((index.num_groups,), torch.inf, dtype=rewards.dtype, device=rewards.device)
    hi = (-inf).scatter_reduce(0, index.inverse, rewards, reduce="amax")
    lo = inf.scatter_reduce(0, index.inverse, rewards, reduce="amin")
    return ((hi - lo) > eps)[index.inverse]


@SAMPLE_FILTERS.register("accuracy_range")
def accuracy_range_filter(rewards: Tensor, group_ids: Tensor, *, low: float = 0.2, high: float = 0.8) -> Tensor:
    """Accuracy-range filter (PRIME, Cui et al. 2025): keep prompts whose group accuracy lies in
    ``[low, high]`` (inclusive), dropping ones that are too easy or too hard.

    rewards ``[B]``: per-sample correctness in [0, 1]; group_ids ``[B]`` -> keep ``[B]`` bool.
    """
    index = group_index(group_ids)
    total, count = group_sum_count(rewards, index)
    acc = (total / count.clamp_min(1))[index.inverse]
    return (acc >= low) & (acc <= high)


def overlong_penalty(
    response_lengths: Tensor, *, max_length: int, buffer_length: int, penalty: float = 1.0
) -> Tensor:
    """Soft overlong punishment (DAPO, Yu et al. 2025), a length reward to add to the outcome reward.

    With ``L_max = max_length`` and ``L_cache = buffer_length``:
    ``0`` if ``L <= L_max - L_cache``; ``((L_max - L_cache) - L) / L_cache`` if
    ``L_max - L_cache < L <= L_max``; ``-1`` if ``L > L_max``; all times ``penalty``.
    response_lengths ``[B]`` -> ``[B]`` float.
    """
    if not 0 < buffer_length <= max_length:
        raise ValueError("need 0 < buffer_length <= max_length")
    length = response_lengths.to(torch.float32)
    start = float(max_length - buffer_length)
    ramp = (start - length) / buffer_length
    out = torch.where(length <= start, torch.zeros_like(length), ramp)
    out = torch.where(length > max_length, torch.full_like(length, -1.0), out)
    return penalty * out


def overlong_filter(response_lengths: Tensor, truncated: Tensor | None = None, *, max_length: int) -> Tensor:
    """Overlong filtering (DAPO): keep ``[B]`` bool = not truncated (``L < max_length`` when
    ``truncated`` is not given), so cut-off responses do not get a misleading reward."""
    if truncated is not None:
        return ~(truncated if truncated.dtype == torch.bool else truncated != 0)
    return response_lengths < max_length
