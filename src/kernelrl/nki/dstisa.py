"""`nki.isa` of the newer standalone `nki` package (NKI Beta 2 and later, `import nki.isa as nisa`): the
instructions of `kernelrl.nki.isa` in destination-passing form. Each writes its result into `dst` (an
SBUF/PSUM tile or a view of one; for `dma_copy` also an HBM tensor) and returns nothing.

`dst` must have the result's partition size and number of elements per partition. `nc_matmul` into a PSUM
`dst` follows `accumulate`: True adds, False overwrites, None (the default) adds onto the elements whose last
write was a matmul and that nothing has read since (an open accumulation group: the k-loop of a tiled
matmul) and overwrites the others, so a fresh `nl.ndarray(..., buffer=nl.psum)`, or one whose result was
copied out, starts a group with its first matmul.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kernelrl.nki import isa as _isa
from kernelrl.nki import language as nl
from kernelrl.nki.rules import fail
from kernelrl.nki.tensors import PSUM, Tile, current_run, float32, write_into
from kernelrl.nki.trace import traced

__all__ = [
    "activation", "bn_aggr", "bn_stats", "dma_copy", "engine", "memset", "nc_matmul", "nc_transpose", "reciprocal",
    "scalar_tensor_tensor", "tensor_copy", "tensor_reduce", "tensor_scalar", "tensor_scalar_reduce", "tensor_tensor",
    "tensor_tensor_scan",
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
    write_into(dst, product, "nisa.nc_matmul", accumulate=accumulate, matmul=True)


@traced("nki.isa.nc_transpose")
def nc_transpose(dst: Tile, data: Tile, **_: Any) -> None:
    """dst = data transposed between partition and free axes (Tensor Engine)."""
    with _scratch():
        out = _isa.nc_transpose(data)
    write_into(dst, out, "nisa.nc_transpose")


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
    write_into(dst, out, "nisa.activation")
    if reduced is not None:
        write_into(reduce_res, reduced, "nisa.activation (reduce_res)")


@traced("nki.isa.tensor_tensor")
def tensor_tensor(dst: Tile, data1: Tile, data2: Tile, op: Any, **_: Any) -> None:
    """dst = op(data1, data2) elementwise (Vector Engine)."""
    with _scratch():
        out = _isa.tensor_tensor(data1, data2, op)
    write_into(dst, out, "nisa.tensor_tensor")


@traced("nki.isa.tensor_scalar")
def tensor_scalar(
    dst: Tile, data: Tile, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
    reverse1: bool = False, **_: Any,
) -> None:
    """dst = (data op0 operand0) op1 operand1; operands: scalars or [P, 1] tiles (Vector Engine)."""
    with _scratch():
        out = _isa.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1)
    write_into(dst, out, "nisa.tensor_scalar")


@traced("nki.isa.scalar_tensor_tensor")
def scalar_tensor_tensor(
    dst: Tile, data: Tile, op0: Any, operand0: Any, op1: Any, operand1: Tile, reverse0: bool = False,
    reverse1: bool = False, **_: Any,
) -> None:
    """dst = (data op0 operand0) op1 operand1; operand0 a scalar or [P, 1] tile, operand1 a tile."""
    with _scratch():
        out = _isa.scalar_tensor_tensor(data=data, op0=op0, operand0=operand0, op1=op1, operand1=operand1,
                                        reverse0=reverse0, reverse1=reverse1)
    write_into(dst, out, "nisa.scalar_tensor_tensor")


@traced("nki.isa.tensor_scalar_reduce")
def tensor_scalar_reduce(
    dst: Tile, data: Tile, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Tile, reverse0: bool = False,
    **_: Any,
) -> None:
    """dst = data op0 operand0, and `reduce_res` [P, 1] = its free-axis reduction with reduce_op."""
    with _scratch():
        out = _isa.tensor_scalar(data, op0, operand0, reverse0)
        reduced = _isa.tensor_reduce(reduce_op, out, axis=tuple(range(1, out.ndim)), keepdims=True)
    write_into(dst, out, "nisa.tensor_scalar_reduce")
    write_into(reduce_res, reduced, "nisa.tensor_scalar_reduce (reduce_res)")


@traced("nki.isa.tensor_reduce")
def tensor_reduce(dst: Tile, op: Any, data: Tile, axis: Any, negate: bool = False, keepdims: bool = False,
                  **_: Any) -> None:
    """dst = the reduction of data's free axes `axis` with op (Vector Engine)."""
    with _scratch():
        out = _isa.tensor_reduce(op, data, axis, negate=negate, keepdims=keepdims)
    write_into(dst, out, "nisa.tensor_reduce")


@traced("nki.isa.tensor_tensor_scan")
def tensor_tensor_scan(
    dst: Tile, data0: Tile, data1: Tile, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
    reverse1: bool = False, **_: Any,
) -> None:
    """dst[:, i] = (data0[:, i] op0 dst[:, i-1]) op1 data1[:, i], from `initial` (Vector Engine)."""
    with _scratch():
        out = _isa.tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0, reverse1)
    write_into(dst, out, "nisa.tensor_tensor_scan")


@traced("nki.isa.tensor_copy")
def tensor_copy(dst: Tile, src: Tile, dtype: Any = None, **_: Any) -> None:
    """dst = src (SBUF or PSUM), cast to dst's dtype (Vector Engine); `dtype` is accepted and dst's wins."""
    with _scratch():
        out = _isa.tensor_copy(src)
    write_into(dst, out, "nisa.tensor_copy")


@traced("nki.isa.reciprocal")
def reciprocal(dst: Tile, data: Tile, **_: Any) -> None:
    """dst = 1 / data (Vector Engine)."""
    with _scratch():
        out = nl.reciprocal(data)
    write_into(dst, out, "nisa.reciprocal")


@traced("nki.isa.memset")
def memset(dst: Tile, value: float, **_: Any) -> None:
    """Fill dst with `value` (GpSimd Engine)."""
    if not isinstance(dst, Tile):
        raise fail("err-dst", f"nisa.memset: dst must be an SBUF or PSUM tile, got {getattr(dst, 'buffer', dst)!r}")
    with _scratch():
        out = nl.full(dst.shape, value, dst.dtype)
    write_into(dst, out, "nisa.memset")  # type: ignore[arg-type]


@traced("nki.isa.bn_stats")
def bn_stats(dst: Tile, data: Tile, **_: Any) -> None:
    """dst [P, 6] = per-partition statistics of data (see `kernelrl.nki.isa.bn_stats`)."""
    with _scratch():
        out = _isa.bn_stats(data)
    write_into(dst, out, "nisa.bn_stats")


@traced("nki.isa.bn_aggr")
def bn_aggr(dst: Tile, data: Tile, **_: Any) -> None:
    """dst [P, 2] = mean and variance from bn_stats outputs."""
    with _scratch():
        out = _isa.bn_aggr(data)
    write_into(dst, out, "nisa.bn_aggr")


@traced("nki.isa.dma_copy")
def dma_copy(dst: Any, src: Any, **_: Any) -> None:
    """Copy src into dst on a DMA queue (HBM <-> SBUF, SBUF -> SBUF, HBM -> HBM)."""
    if isinstance(dst, Tile) and dst._origin is not None:
        raise fail("err-dst", "nisa.dma_copy: an on-chip dst is a tile or a slice of one, not an index-expression copy")
    _isa.dma_copy(dst=dst, src=src)
    if isinstance(dst, Tile):
        dst._open[...] = False
