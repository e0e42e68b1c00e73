"""Per-group statistics with scatter/index ops (no Python loop over samples or groups).

A group is the set of samples sharing a value of ``group_ids [B]`` (e.g. the prompt index).
Optional ``valid [B]`` (bool) restricts which samples are members; non-members get zeros.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor


class GroupIndex(NamedTuple):
    """Dense group numbering: ``inverse [B]`` in ``0..num_groups-1``."""

    inverse: Tensor
    num_groups: int


def group_index(group_ids: Tensor) -> GroupIndex:
    """Map arbitrary integer ids ``[B]`` to dense group numbers ``[B]``."""
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    return GroupIndex(inverse, int(uniq.numel()))


def key_ids(keys: Sequence[Hashable]) -> Tensor:
    """Integer ids ``[B]`` for typed group keys (e.g. ``(prompt, turn)`` tuples): equal keys, equal ids,
    numbered in sorted key order, so groups never depend on how two ids would pack into one int."""
    number = {key: i for i, key in enumerate(sorted(set(keys)))}  # type: ignore[type-var]
    return torch.tensor([number[key] for key in keys], dtype=torch.long)


def _members(values: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor]:
    if valid is None:
        return values, torch.ones_like(values)
    v = valid if valid.dtype == torch.bool else valid != 0
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    return torch.where(v, values, zero), v.to(values.dtype)


def group_sum_count(values: Tensor, index: GroupIndex, valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per-group sum and member count, both ``[num_groups]`` in the dtype of ``values [B]``."""
    vals, weight = _members(values, valid)
    total = vals.new_zeros(index.num_groups).index_add_(0, index.inverse, vals)
    count = vals.new_zeros(index.num_groups).index_add_(0, index.inverse, weight)
    return total, count


def group_mean_std(
    values: Tensor, index: GroupIndex, valid: Tensor | None = None, *, unbiased: bool = True
) -> tuple[Tensor, Tensor]:
    """Per-sample group mean and group std, each ``[B]`` (gathered back to the samples).

    The std uses Bessel's correction when ``unbiased``; a group with too few members for the
    chosen estimator has std 0.
    """
    total, count = group_sum_count(values, index, valid)
    mean_g = total / count.clamp_min(1)
    vals, member = _members(values, valid)
    dev = (vals - mean_g[index.inverse]) * member
    sq = vals.new_zeros(index.num_groups).index_add_(0, index.inverse, dev * dev)
    denom = count - 1 if unbiased else count
    var_g = torch.where(denom > 0, sq / denom.clamp_min(1), torch.zeros_like(sq))
    return mean_g[index.inverse], var_g.sqrt()[index.inverse]


def leave_one_out_mean(values: Tensor, index: GroupIndex, valid: Tensor | None = None) -> Tensor:
    """Mean of the OTHER members of each sample's group: ``[B]``.

    ``b_i = (sum_g - x_i) / (n_g - 1)``; 0 for a group of one (so ``x_i - b_i = x_i``) and for
    non-members.
    """
    total, count = group_sum_count(values, index, valid)
    vals, member = _members(values, valid)
    n = count[index.inverse]
    others = total[index.inverse] - vals
    base = torch.where(n > 1, others / (n - 1).clamp_min(1), torch.zeros_like(others))
    return base * member
