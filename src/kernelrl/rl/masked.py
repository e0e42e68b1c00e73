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
    return m.sum(dtype=dtype) if dim is None else m.sum(dim, dtype=dtype)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean over positions where ``mask`` holds; 0 where nothing counts."""
    count = mask_count(mask, dim, values.dtype)
    return masked_sum(values, mask, dim) / count.clamp_min(1)


def masked_var(values: Tensor, mask: Tensor, *, unbiased: bool = False) -> Tensor:
    """Variance over every position where ``mask`` holds (a scalar); 0 for fewer than two positions."""
    m = as_bool_mask(mask)
    centred = zero_masked(values, m)
    count = mask_count(m, None, values.dtype)
    centred.sub_(centred.sum() / count.clamp_min(1)).masked_fill_(~m, 0)
    sq = sum_of_squares(centred)
    denom = count - 1 if unbiased else count
    return torch.where(count > 1, sq / denom.clamp_min(1), torch.zeros_like(sq))


def sum_of_squares(x: Tensor) -> Tensor:
    """``sum(x ** 2)`` without a full-size temporary, accurate in float32: per-row norms (short
    accumulations) first, then the sum of their squares. Any shape -> scalar."""
    if x.dim() == 0:
        return x * x
    return torch.linalg.vector_norm(x, dim=-1).square().sum()


def whiten_(x: Tensor, mask: Tensor, *, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """In-place `masked_whiten` of a tensor the caller owns whose masked positions are already 0."""
    m = as_bool_mask(mask)
    keep_out = ~m
    count = mask_count(m, None, x.dtype).clamp_min(1)
    mean = x.sum() / count
    x.sub_(mean).masked_fill_(keep_out, 0)
    var = sum_of_squares(x) / count
    x.mul_(torch.rsqrt(var + eps))
    if not shift_mean:
        x.add_(mean).masked_fill_(keep_out, 0)
    return x


def masked_whiten(values: Tensor, mask: Tensor, *, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Batch whitening over the valid tokens: ``(x - mean) / sqrt(var + eps)``, zero where masked.

    values, mask: ``[B, T]`` (any shape works). Mean and variance are taken over every valid position
    of the whole tensor; the variance is the population one (divided by n, as OpenAI Baselines' ppo2;
    verl divides by n - 1). With ``shift_mean=False`` the mean is added back.
    """
    return whiten_(zero_masked(values, mask), mask, shift_mean=shift_mean, eps=eps)


def last_token_index(mask: Tensor) -> Tensor:
    """Index of the last valid position per row: ``[B, T] -> [B]`` (long); -1 for an empty row."""
    m = as_bool_mask(mask)
    width = m.shape[-1]
    dtype = torch.int16 if width < 2**15 else torch.int64
    positions = torch.arange(width, dtype=dtype, device=m.device)
    last = (m * positions).amax(dim=-1).to(torch.long)  # an empty row and "only t=0" both give 0
    return torch.where(m.any(dim=-1), last, torch.full_like(last, -1))


def place_at_last_token(values: Tensor, mask: Tensor) -> Tensor:
    """Scatter per-sample ``values [B]`` onto the last valid token of each row: ``[B, T]``.

    Every other position is zero; an empty row stays all zero.
    """
    out = torch.zeros(mask.shape, dtype=values.dtype, device=values.device)
    return add_at_last_token_(out, values, mask)


def add_at_last_token_(x: Tensor, values: Tensor, mask: Tensor) -> Tensor:
    """In place: add ``values [B]`` at the last valid token of each row of ``x [B, T]``."""
    last = last_token_index(mask)
    src = torch.where(last >= 0, values, torch.zeros_like(values)).to(x.dtype).unsqueeze(-1)
    return x.scatter_add_(-1, last.clamp_min(0).unsqueeze(-1), src)


def broadcast_to_tokens(values: Tensor, mask: Tensor) -> Tensor:
    """Per-sample ``values [B]`` copied onto every valid token: ``[B, T]``, zero where masked."""
    return zero_masked(values.unsqueeze(-1).expand(mask.shape), mask)


def reverse_cumsum_(r: Tensor, mask: Tensor, gamma: float = 1.0, *, fill: bool = True) -> Tensor:
    """`reverse_cumsum` of a tensor the caller owns whose masked positions are already 0.

    Returns a new tensor (``r`` may be overwritten as scratch). With ``fill=False`` masked
    positions are left holding running sums, for callers that zero them later anyway.
    """
    m = as_bool_mask(mask)
    if gamma == 1.0:
        out = r.flip(-1).cumsum_(-1).flip(-1)
        return out.masked_fill_(~m, 0) if fill else out
    rt = r.transpose(0, -1).contiguous()
    mt = m.transpose(0, -1).contiguous()
    running = torch.zeros_like(rt[0])
    for t in range(rt.shape[0] - 1, -1, -1):
        running = torch.where(mt[t], rt[t] + gamma * running, running)
        rt[t] = running
    return rt.transpose(0, -1).contiguous().masked_fill_(~m, 0)


def reverse_cumsum(values: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Discounted return-to-go along the last dim over valid tokens: ``[B, T] -> [B, T]``.

    ``G_t = r_t + gamma * G_{t'}`` where ``t'`` is the next valid position of the row (masked
    positions are skipped, neither adding reward nor a discount step). Zero where masked.
    ``gamma == 1`` is a flipped cumulative sum; otherwise one vectorised step per position.
    """
    return reverse_cumsum_(zero_masked(values, mask), mask, gamma)
