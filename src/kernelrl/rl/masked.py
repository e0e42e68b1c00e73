"""Masked reductions over ``[B, T]`` token tensors.

Every helper selects with `torch.where` rather than multiplying by the mask, so whatever sits in a
masked position (padding, NaN, inf) can never reach a result.
"""

from __future__ import annotations

import torch
from torch import Tensor


def as_bool_mask(mask: Tensor) -> Tensor:
    """A bool view of a response mask (nonzero = the position counts). Shape is unchanged."""
    return mask if mask.dtype == torch.bool else mask != 0


def zero_masked(values: Tensor, mask: Tensor) -> Tensor:
    """``values`` where ``mask`` holds, exact zero elsewhere (also where values are NaN/inf)."""
    return torch.where(as_bool_mask(mask), values, torch.zeros((), dtype=values.dtype, device=values.device))


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``values`` over positions where ``mask`` holds; over ``dim`` or everything."""
    kept = zero_masked(values, mask)
    return kept.sum() if dim is None else kept.sum(dim)


def mask_count(mask: Tensor, dim: int | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """How many positions count, as ``dtype``; over ``dim`` or everything."""
    m = as_bool_mask(mask)
    return (m.sum() if dim is None else m.sum(dim)).to(dtype)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean over positions where ``mask`` holds; 0 where nothing counts."""
    count = mask_count(mask, dim, values.dtype)
    return masked_sum(values, mask, dim) / count.clamp_min(1)


def masked_var(values: Tensor, mask: Tensor, *, unbiased: bool = False) -> Tensor:
    """Variance over every position where ``mask`` holds (a scalar); 0 for fewer than two positions."""
    count = mask_count(mask, None, values.dtype)
    mean = masked_mean(values, mask)
    sq = masked_sum((values - mean) ** 2, mask)
    denom = count - 1 if unbiased else count
    return torch.where(count > 1, sq / denom.clamp_min(1), torch.zeros_like(sq))


def masked_whiten(values: Tensor, mask: Tensor, *, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Batch whitening over the valid tokens: ``(x - mean) / sqrt(var + eps)``, zero where masked.

    values, mask: ``[B, T]`` (any shape works). Mean and (population) variance are taken over
    every valid position of the whole tensor. With ``shift_mean=False`` the mean is added back.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    white = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        white = white + mean
    return zero_masked(white, mask)


def last_token_index(mask: Tensor) -> Tensor:
    """Index of the last valid position per row: ``[B, T] -> [B]`` (long); -1 for an empty row."""
    m = as_bool_mask(mask)
    positions = torch.arange(m.shape[-1], device=m.device).expand_as(m)
    return torch.where(m, positions, torch.full_like(positions, -1)).amax(dim=-1)


def place_at_last_token(values: Tensor, mask: Tensor) -> Tensor:
    """Scatter per-sample ``values [B]`` onto the last valid token of each row: ``[B, T]``.

    Every other position is zero; an empty row stays all zero.
    """
    last = last_token_index(mask)
    out = torch.zeros(mask.shape, dtype=values.dtype, device=values.device)
    idx = last.clamp_min(0).unsqueeze(-1)
    src = torch.where(last >= 0, values, torch.zeros_like(values)).unsqueeze(-1)
    return out.scatter_(-1, idx, src)


def broadcast_to_tokens(values: Tensor, mask: Tensor) -> Tensor:
    """Per-sample ``values [B]`` copied onto every valid token: ``[B, T]``, zero where masked."""
    return zero_masked(values.unsqueeze(-1).expand(mask.shape), mask)


def reverse_cumsum(values: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Discounted return-to-go along the last dim over valid tokens: ``[B, T] -> [B, T]``.

    ``G_t = r_t + gamma * G_{t'}`` where ``t'`` is the next valid position of the row (masked
    positions are skipped, neither adding reward nor a discount step). Zero where masked.
    ``gamma == 1`` is a flipped cumulative sum; otherwise one vectorised step per position.
    """
    m = as_bool_mask(mask)
    r = zero_masked(values, m)
    if gamma == 1.0:
        return zero_masked(r.flip(-1).cumsum(-1).flip(-1), m)
    rt = r.transpose(0, -1).contiguous()
    mt = m.transpose(0, -1).contiguous()
    out = torch.zeros_like(rt)
    running = torch.zeros_like(rt[0])
    for t in range(rt.shape[0] - 1, -1, -1):
        running = torch.where(mt[t], rt[t] + gamma * running, running)
        out[t] = running
    return zero_masked(out.transpose(0, -1), m)
