"""Shared helpers for the kernelrl.rl tests (padding with garbage, tree comparison)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

F64 = torch.float64


def t(values: Any, dtype: torch.dtype = F64) -> Tensor:
    return torch.tensor(values, dtype=dtype)


def garbage_like(x: Tensor, gen: torch.Generator | None = None) -> Tensor:
    """Values that must never reach a result: NaN, ±inf and huge numbers (floats), big ints."""
    if x.dtype == torch.bool:
        return torch.ones_like(x)
    if not x.is_floating_point():
        return torch.full_like(x, 12345)
    pool = torch.tensor([math.nan, math.inf, -math.inf, 1e30, -1e30], dtype=x.dtype)
    idx = torch.randint(0, len(pool), x.shape, generator=gen)
    return pool[idx]


def scramble_masked(x: Tensor, mask: Tensor, gen: torch.Generator | None = None) -> Tensor:
    """Replace positions where ``mask`` ([B, T], broadcast over trailing dims) is false by garbage."""
    m = mask.bool()
    while m.dim() < x.dim():
        m = m.unsqueeze(-1)
    return torch.where(m, x, garbage_like(x, gen))


def pad_columns(x: Tensor, extra: int, gen: torch.Generator | None = None, *, fill: float | None = None) -> Tensor:
    """Append ``extra`` columns along dim 1 holding garbage (or ``fill``)."""
    shape = list(x.shape)
    shape[1] = extra
    pad = torch.zeros(shape, dtype=x.dtype)
    pad = garbage_like(pad, gen) if fill is None else torch.full(shape, fill, dtype=x.dtype)
    return torch.cat([x, pad], dim=1)


def assert_tree_close(a: Any, b: Any, *, width: int | None = None, atol: float = 1e-10, path: str = "") -> None:
    """Compare nested outputs; token tensors of ``a`` are cut to ``width`` columns first."""
    if isinstance(a, Tensor):
        assert isinstance(b, Tensor), path
        if width is not None and a.dim() >= 2 and a.shape[1] != b.shape[1]:
            assert torch.all(a[:, width:] == 0), f"{path}: padding not zero"
            a = a[:, :width]
        assert a.shape == b.shape, f"{path}: {a.shape} vs {b.shape}"
        if a.is_floating_point():
            assert torch.allclose(a, b, atol=atol, rtol=1e-9, equal_nan=False), f"{path}: {a} vs {b}"
        else:
            assert torch.equal(a, b), f"{path}: {a} vs {b}"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_tree_close(a[k], b[k], width=width, atol=atol, path=f"{path}.{k}")
    elif isinstance(a, tuple | list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_tree_close(x, y, width=width, atol=atol, path=f"{path}[{i}]")
    else:
        assert a == b, path
