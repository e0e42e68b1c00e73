"""`nisa`: the interpreted subset of `neuronxcc.nki.isa` (explicit engine instructions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernelrl.nki import language as nl
from kernelrl.nki.rules import fail
from kernelrl.nki.tensors import PSUM, Mask, Tile, current_run, to_dtype

__all__ = [
    "activation", "memset", "nc_matmul", "nc_transpose", "tensor_copy", "tensor_reduce", "tensor_scalar",
    "tensor_tensor",
]

_REDUCERS = {np.add: np.sum, np.maximum: np.max, np.minimum: np.min, np.multiply: np.prod}


def _np_of(op: Any, what: str) -> Callable[..., np.ndarray]:
    fn = getattr(op, "_np", None) or (op if isinstance(op, np.ufunc) else None)
    if fn is None:
        raise fail("err-unsupported-op", f"{what}: unsupported op {op!r}; pass an nl function such as nl.exp or nl.add")
    return fn


def nc_matmul(stationary: Tile, moving: Tile, *, mask: Mask | None = None, **_: Any) -> Tile:
    """stationary[K, M].T @ moving[K, N] -> new fp32 PSUM tile [M, N] (K, M <= 128; N <= 512)."""
    return nl.matmul_core(stationary, moving, "nisa.nc_matmul")


def nc_transpose(data: Tile, *, mask: Mask | None = None, **_: Any) -> Tile:
    """Partition/free transpose of a 2-D tile on the Tensor Engine; the result is a PSUM tile."""
    out = nl._pe_transpose(data, "nisa.nc_transpose")
    return Tile(out, data.dtype, PSUM)


def activation(
    op: Any, data: Tile, *, bias: Any = None, scale: Any = 1.0, dtype: Any = None, mask: Mask | None = None
) -> Tile:
    """op(data * scale + bias) in one Scalar Engine instruction; bias/scale: scalars or [P, 1] tiles."""
    fn = _np_of(op, "nisa.activation")
    operands = [data, scale, 0.0 if bias is None else bias]
    return nl._apply(lambda x, s, b: fn(x * s + b), operands, "scalar", "nisa.activation", dtype, mask)


def tensor_tensor(data1: Tile, data2: Tile, op: Any, *, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """op(data1, data2) elementwise on the Vector Engine; both operands must be tiles."""
    if not (isinstance(data1, Tile) and isinstance(data2, Tile)):
        nl._tile_operands([data1, data2], "nisa.tensor_tensor")
        raise fail("err-operand", "nisa.tensor_tensor needs two tiles; use nisa.tensor_scalar for a scalar operand")
    return nl._apply(_np_of(op, "nisa.tensor_tensor"), [data1, data2], "vector", "nisa.tensor_tensor", dtype, mask)


def tensor_scalar(
    data: Tile, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
    reverse1: bool = False, *, dtype: Any = None, mask: Mask | None = None, **_: Any,
) -> Tile:
    """(data op0 operand0) op1 operand1 on the Vector Engine; operands: scalars or [P, 1] tiles."""
    f0 = _np_of(op0, "nisa.tensor_scalar")
    f1 = _np_of(op1, "nisa.tensor_scalar") if op1 is not None else None

    def fn(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = f0(a, x) if reverse0 else f0(x, a)
        if f1 is not None:
            y = f1(b, y) if reverse1 else f1(y, b)
        return y

    operands = [data, operand0, 0.0 if operand1 is None else operand1]
    return nl._apply(fn, operands, "vector", "nisa.tensor_scalar", dtype, mask)


def tensor_reduce(
    op: Any, data: Tile, axis: Any, *, dtype: Any = None, negate: bool = False, keepdims: bool = False,
    mask: Mask | None = None,
) -> Tile:
    """Reduce free axes with op (nl.add, nl.maximum, nl.minimum, nl.multiply) on the Vector Engine."""
    fn = _np_of(op, "nisa.tensor_reduce")
    if fn not in _REDUCERS:
        raise fail("err-unsupported-op", f"nisa.tensor_reduce: unsupported reduce op {op!r}")
    reducer = {np.sum: nl.sum, np.max: nl.max, np.min: nl.min, np.prod: nl.prod}[_REDUCERS[fn]]
    out = reducer(data, axis, dtype=dtype, keepdims=keepdims, mask=mask)
    if negate:
        out.data = -out.data
    return out


def tensor_copy(src: Tile, *, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """Copy a tile (PSUM or SBUF) into a new SBUF tile on the Vector Engine."""
    return nl.copy(src, dtype=dtype, mask=mask)


def memset(shape: Any, value: float, dtype: Any, **_: Any) -> Tile:
    """A new SBUF tile filled with `value` (GpSimd Engine)."""
    current_run()
    return nl.full(shape, value, to_dtype(dtype))  # type: ignore[return-value]
