"""`nki.isa` of the newer standalone `nki` package (NKI Beta 2 and later, `import nki.isa as nisa`): the
instructions of `kernelrl.nki.isa` in destination-passing form. Each writes its result into `dst` (an
SBUF/PSUM tile or a view of one; for `dma_copy` also an HBM tensor) and returns nothing.

`dst` must have the result's partition size and number of elements per partition. `nc_matmul` into a PSUM
`dst` follows `accumulate`: True adds, False overwrites, None (the default) adds onto the elements whose last
write was a matmul (an open accumulation group: the k-loop of a tiled matmul) and overwrites the others, so a
fresh `nl.ndarray(..., buffer=nl.psum)` starts a group with its first matmul.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from kernelrl.nki import isa as _isa
from kernelrl.nki import language as nl
from kernelrl.nki.rules import fail
from kernelrl.nki.tensors import (
    PSUM,
    Tile,
    _full_index,
    cast,
    current_run,
    float32,
    scatter,
)
from kernelrl.nki.trace import traced

__all__ = [
    "activation", "bn_aggr", "bn_stats", "dma_copy", "engine", "memset", "nc_matmul", "nc_transpose", "reciprocal",
    "tensor_copy", "tensor_reduce", "tensor_scalar", "tensor_tensor", "tensor_tensor_scan",
]


class engine:
    """`nisa.engine.*`: which engine runs an instruction (accepted; the cost model keeps its own choice)."""

    unknown = "unknown"
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"


@contextmanager
def _scratch() -> Iterator[None]:
    """The instruction's result is computed into a temporary that is no allocation of the kernel's."""
    run = current_run()
    run.scratch += 1
    try:
        yield
    finally:
        run.scratch -= 1


def _values_for(dst: Tile, value: Tile, what: str) -> np.ndarray:
    values = nl.operand_values(value)
    if values.shape == dst.shape:
        return values
    if values.ndim and dst.ndim and values.shape[0] == dst.shape[0] and values.size == math.prod(dst.shape):
        return values.reshape(dst.shape)
    raise fail("err-shape-mismatch", f"{what}: a result of shape {values.shape} does not fit dst of shape {dst.shape} "
               "(dst needs the same partition size and elements per partition)")


def _into(dst: Any, value: Tile, what: str, *, accumulate: bool | None = False, matmul: bool = False) -> None:
    """Write `value` into the tile `dst` (adding where accumulating) and keep its bookkeeping."""
    if not isinstance(dst, Tile):
        raise fail("err-dst", f"{what}: dst must be an SBUF or PSUM tile (nl.ndarray(..., buffer=nl.sbuf)), got "
                   f"{getattr(dst, 'buffer', type(dst).__name__)}")
    if dst.pdim:
        raise fail("err-block-dim", f"{what}: dst of shape {dst.shape} has block dimensions; index a block first")
    values = _values_for(dst, value, what)
    run = current_run()
    add = np.zeros(dst.shape, bool) if accumulate is False else (
        np.ones(dst.shape, bool) if accumulate is True else dst._open.copy())
    with np.errstate(all="ignore"):
        dst._data[...] = cast(np.where(add, dst._data + values, values), dst.dtype)
    run.wrote(dst._stamps, ~add)  # accumulation is not a carried write (NKI's associative-reduction rule)
    dst._open[...] = matmul
    if dst._origin is not None:  # dst was gathered through index expressions: write through to its tile
        parent, access = dst._origin
        scatter(parent._data, access, dst._data)
        scatter(parent._open, access, dst._open)
        run.wrote(parent._stamps, _full_index(access))


@traced("nki.isa.nc_matmul")
def nc_matmul(
    dst: Tile, stationary: Tile, moving: Tile, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
    is_transpose: bool = False, accumulate: bool | None = None, **_: Any,
) -> None:
    """dst[M, N] (PSUM, fp32) = or += stationary[K, M].T @ moving[K, N] (see the module doc for accumulate)."""
    if isinstance(dst, Tile) and (dst.buffer != PSUM or dst.dtype is not float32):
        raise fail("err-psum-accumulate-dtype", f"nisa.nc_matmul: dst must be an fp32 PSUM tile, got "
                   f"{dst.buffer.upper()} {dst.dtype}")
    with _scratch():
        product = nl.matmul_core(stationary, moving, "nisa.nc_matmul")
    _into(dst, product, "nisa.nc_matmul", accumulate=accumulate, matmul=True)


@traced("nki.isa.nc_transpose")
def nc_transpose(dst: Tile, data: Tile, **_: Any) -> None:
    """dst = data transposed between partition and free axes (Tensor Engine)."""
    with _scratch():
        out = _isa.nc_transpose(data)
    _into(dst, out, "nisa.nc_transpose")


@traced("nki.isa.activation")
def activation(
    dst: Tile, op: Any, data: Tile, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
    reduce_res: Tile | None = None, **_: Any,
) -> None:
    """dst = op(data * scale + bias) (Scalar Engine); with `reduce_op`, `reduce_res` [P, 1] gets its free-axis
    reduction (nl.add, nl.maximum or nl.minimum)."""
    with _scratch():
        out = _isa.activation(op, data, bias=bias, scale=scale)
        reduced = None
        if reduce_op is not None:
            if reduce_res is None:
                raise fail("err-operand", "nisa.activation: reduce_op needs reduce_res, a [P, 1] tile")
            reduced = _isa.tensor_reduce(reduce_op, out, axis=tuple(range(1, out.ndim)), keepdims=True)
    _into(dst, out, "nisa.activation")
    if reduced is not None:
        _into(reduce_res, reduced, "nisa.activation (reduce_res)")


@traced("nki.isa.tensor_tensor")
def tensor_tensor(dst: Tile, data1: Tile, data2: Tile, op: Any, **_: Any) -> None:
    """dst = op(data1, data2) elementwise (Vector Engine)."""
    with _scratch():
        out = _isa.tensor_tensor(data1, data2, op)
    _into(dst, out, "nisa.tensor_tensor")


@traced("nki.isa.tensor_scalar")
def tensor_scalar(
    dst: Tile, data: Tile, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
    reverse1: bool = False, **_: Any,
) -> None:
    """dst = (data op0 operand0) op1 operand1; operands: scalars or [P, 1] tiles (Vector Engine)."""
    with _scratch():
        out = _isa.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1)
    _into(dst, out, "nisa.tensor_scalar")


@traced("nki.isa.tensor_reduce")
def tensor_reduce(dst: Tile, op: Any, data: Tile, axis: Any, negate: bool = False, keepdims: bool = False,
                  **_: Any) -> None:
    """dst = the reduction of data's free axes `axis` with op (Vector Engine)."""
    with _scratch():
        out = _isa.tensor_reduce(op, data, axis, negate=negate, keepdims=keepdims)
    _into(dst, out, "nisa.tensor_reduce")


@traced("nki.isa.tensor_tensor_scan")
def tensor_tensor_scan(
    dst: Tile, data0: Tile, data1: Tile, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
    reverse1: bool = False, **_: Any,
) -> None:
    """dst[:, i] = (data0[:, i] op0 dst[:, i-1]) op1 data1[:, i], from `initial` (Vector Engine)."""
    with _scratch():
        out = _isa.tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0, reverse1)
    _into(dst, out, "nisa.tensor_tensor_scan")


@traced("nki.isa.tensor_copy")
def tensor_copy(dst: Tile, src: Tile, dtype: Any = None, **_: Any) -> None:
    """dst = src (SBUF or PSUM), cast to dst's dtype (Vector Engine); `dtype` is accepted and dst's wins."""
    with _scratch():
        out = _isa.tensor_copy(src)
    _into(dst, out, "nisa.tensor_copy")


@traced("nki.isa.reciprocal")
def reciprocal(dst: Tile, data: Tile, **_: Any) -> None:
    """dst = 1 / data (Vector Engine)."""
    with _scratch():
        out = nl.reciprocal(data)
    _into(dst, out, "nisa.reciprocal")


@traced("nki.isa.memset")
def memset(dst: Tile, value: float, **_: Any) -> None:
    """Fill dst with `value` (GpSimd Engine)."""
    if not isinstance(dst, Tile):
        raise fail("err-dst", f"nisa.memset: dst must be an SBUF or PSUM tile, got {getattr(dst, 'buffer', dst)!r}")
    with _scratch():
        out = nl.full(dst.shape, value, dst.dtype)
    _into(dst, out, "nisa.memset")  # type: ignore[arg-type]


@traced("nki.isa.bn_stats")
def bn_stats(dst: Tile, data: Tile, **_: Any) -> None:
    """dst [P, 6] = per-partition statistics of data (see `kernelrl.nki.isa.bn_stats`)."""
    with _scratch():
        out = _isa.bn_stats(data)
    _into(dst, out, "nisa.bn_stats")


@traced("nki.isa.bn_aggr")
def bn_aggr(dst: Tile, data: Tile, **_: Any) -> None:
    """dst [P, 2] = mean and variance from bn_stats outputs."""
    with _scratch():
        out = _isa.bn_aggr(data)
    _into(dst, out, "nisa.bn_aggr")


@traced("nki.isa.dma_copy")
def dma_copy(dst: Any, src: Any, **_: Any) -> None:
    """Copy src into dst on a DMA queue (HBM <-> SBUF, SBUF -> SBUF, HBM -> HBM)."""
    if isinstance(dst, Tile) and dst._origin is not None:
        raise fail("err-dst", "nisa.dma_copy: an on-chip dst is a tile or a slice of one, not an index-expression copy")
    _isa.dma_copy(dst=dst, src=src)
    if isinstance(dst, Tile):
        dst._open[...] = False
