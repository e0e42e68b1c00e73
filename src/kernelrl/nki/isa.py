"""`nisa`: the interpreted subset of `neuronxcc.nki.isa` (explicit engine instructions)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kernelrl.nki import cost as _cost
from kernelrl.nki import language as nl
from kernelrl.nki.rules import fail
from kernelrl.nki.tensors import (
    PSUM,
    SBUF,
    HbmTensor,
    HbmView,
    Mask,
    Tile,
    cast,
    covered_by,
    current_run,
    float32,
    to_dtype,
    write_into,
)
from kernelrl.nki.trace import traced

__all__ = [
    "activation", "activation_reduce", "affine_select", "bn_aggr", "bn_stats", "dma_copy", "gpsimd_engine", "iota", "memset", "nc_matmul",
    "nc_transpose", "reciprocal", "reduce_cmd", "scalar_engine", "scalar_tensor_tensor", "tensor_copy", "tensor_engine", "tensor_reduce",
    "tensor_scalar", "tensor_scalar_reduce", "tensor_tensor", "tensor_tensor_scan", "unknown_engine",
    "vector_engine",
]

# `engine=` choices (accepted; the cost model charges each instruction to its own engine)
vector_engine, scalar_engine, gpsimd_engine, tensor_engine, unknown_engine = (
    "vector", "scalar", "gpsimd", "tensor", "unknown")

_REDUCERS = {np.add: np.sum, np.maximum: np.max, np.minimum: np.min, np.multiply: np.prod,
             np.sum: np.sum, np.max: np.max, np.min: np.min, np.prod: np.prod}  # op=nl.add or op=nl.max


def _np_of(op: Any, what: str) -> Callable[..., np.ndarray]:
    """The NumPy function of an ALU op: an `nl` function or a facade token (`np.subtract`), recognised by
    identity with the interpreter's own objects, so no candidate-made callable is ever handed tile values."""
    from kernelrl.nki import npfacade
    from kernelrl.nki.trace import _NAMES, OPS, RAW

    fn = None
    name = _NAMES.get(id(op))
    if name is not None and OPS.get(name) is op:
        fn = getattr(RAW[name], "_np", None) or getattr(op, "_np", None)
    elif isinstance(op, npfacade.OpToken) and npfacade.op_token(op.nki_op) is op:
        fn = npfacade.ALU_OPS[op.nki_op]
    if fn is None:
        raise fail("err-unsupported-op", f"{what}: unsupported op {op!r}; pass an nl function such as nl.exp or "
                   "nl.add, or a NumPy ALU op such as np.subtract")
    return fn


def _binary_np_of(op: Any, what: str) -> Callable[..., np.ndarray]:
    """An ALU op as a two-operand function: a one-operand op (`op0=nl.abs, operand0=0.0`) ignores its operand."""
    fn = _np_of(op, what)
    arity = getattr(fn, "nin", None)
    if arity is None:
        arity = len(inspect.signature(fn).parameters)
    return fn if arity != 1 else (lambda x, _operand: fn(x))


@traced("nisa.nc_matmul")
def nc_matmul(stationary: Tile, moving: Tile, *, mask: Mask | None = None, **_: Any) -> Tile:
    """stationary[K, M].T @ moving[K, N] -> new fp32 PSUM tile [M, N] (K, M <= 128; N <= 512)."""
    return nl.matmul_core(stationary, moving, "nisa.nc_matmul")


@traced("nisa.nc_transpose")
def nc_transpose(data: Tile, *, mask: Mask | None = None, **_: Any) -> Tile:
    """Partition/free transpose of a 2-D tile on the Tensor Engine; the result is a PSUM tile."""
    out = nl._pe_transpose(data, "nisa.nc_transpose")
    return Tile(out, data.dtype, PSUM)


@traced("nisa.activation")
def activation(
    op: Any, data: Tile, *, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None, reduce_res: Tile | None = None,
    reduce_cmd: str = "reset_reduce", dtype: Any = None, mask: Mask | None = None, **_: Any,
) -> Tile:
    """op(data * scale + bias) in one Scalar Engine instruction; bias/scale: scalars or [P, 1] tiles. With
    `reduce_op`, its free-axis reduction goes to `reduce_res` ([P, 1]; `reduce_cmd`: reset_reduce writes it,
    reduce combines with what is there, idle skips it)."""
    fn = _np_of(op, "nisa.activation")
    operands = [data, scale, 0.0 if bias is None else bias]
    out = nl._apply(lambda x, s, b: fn(x * s + b), operands, "scalar", "nisa.activation", dtype, mask)
    if reduce_op is not None and reduce_cmd != reduce_cmd_names.idle:
        _reduce_into(reduce_op, out, reduce_res, "nisa.activation", combine=reduce_cmd == reduce_cmd_names.reduce)
    return out


class reduce_cmd_names:
    """`nisa.reduce_cmd.*`: how an instruction's reduction meets its accumulator."""

    idle = "idle"
    reset = "reset"
    reset_reduce = "reset_reduce"
    reduce = "reduce"


@traced("nisa.reciprocal")
def reciprocal(data: Tile, *, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """1 / data (Vector Engine)."""
    return nl._apply(lambda x: 1.0 / x, [data], "vector", "nisa.reciprocal", dtype, mask)


def _reduce_into(reduce_op: Any, result: Tile, reduce_res: Any, what: str, combine: bool = False) -> None:
    """Write the free-axis reduction of `result` with `reduce_op` into the [P, 1] tile `reduce_res` (or
    combine it with reduce_res's values)."""
    if not isinstance(reduce_res, Tile):
        raise fail("err-operand", f"{what}: reduce_res must be an SBUF tile of shape [P, 1]")
    reduced = tensor_reduce(reduce_op, result, axis=tuple(range(1, result.ndim)), keepdims=True)
    if combine:
        both = nl.operand_values(reduce_res).reshape(reduced.shape).astype(np.float64)
        reduced = Tile(_np_of(reduce_op, what)(both, nl.operand_values(reduced)), reduced.dtype, SBUF, allocate=False)
    write_into(reduce_res, reduced, f"{what} (reduce_res)")


@traced("nisa.activation_reduce")
def activation_reduce(
    op: Any, data: Tile, *, reduce_op: Any, reduce_res: Tile, bias: Any = None, scale: Any = 1.0, dtype: Any = None,
    mask: Mask | None = None, **_: Any,
) -> Tile:
    """activation(op, data, bias, scale), and its free-axis reduction with `reduce_op` written into
    `reduce_res` ([P, 1]) by the same Scalar Engine instruction."""
    out = activation(op, data, bias=bias, scale=scale, dtype=dtype, mask=mask)
    _reduce_into(reduce_op, out, reduce_res, "nisa.activation_reduce")  # type: ignore[arg-type]
    return out


@traced("nisa.tensor_scalar_reduce")
def tensor_scalar_reduce(
    *, data: Tile, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Tile, reverse0: bool = False,
    dtype: Any = None, mask: Mask | None = None, **_: Any,
) -> Tile:
    """data op0 operand0 (Vector Engine), and its free-axis reduction with `reduce_op` into `reduce_res`."""
    out = tensor_scalar(data, op0, operand0, reverse0, dtype=dtype, mask=mask)
    _reduce_into(reduce_op, out, reduce_res, "nisa.tensor_scalar_reduce")
    return out


@traced("nisa.scalar_tensor_tensor")
def scalar_tensor_tensor(
    *, data: Tile, op0: Any, operand0: Any, op1: Any, operand1: Tile, reverse0: bool = False,
    reverse1: bool = False, dtype: Any = None, mask: Mask | None = None, **_: Any,
) -> Tile:
    """(data op0 operand0) op1 operand1 (Vector Engine): operand0 a scalar or [P, 1] tile, operand1 a tile."""
    f0, f1 = _binary_np_of(op0, "nisa.scalar_tensor_tensor"), _binary_np_of(op1, "nisa.scalar_tensor_tensor")
    if not isinstance(operand1, Tile):
        raise fail("err-operand", "nisa.scalar_tensor_tensor: operand1 must be a tile (use tensor_scalar for scalars)")

    def fn(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = f0(a, x) if reverse0 else f0(x, a)
        return f1(b, y) if reverse1 else f1(y, b)

    return nl._apply(fn, [data, operand0, operand1], "vector", "nisa.scalar_tensor_tensor", dtype, mask)


@traced("nisa.affine_select")
def affine_select(pred: Mask, on_true_tile: Tile, on_false_value: Any, *, dtype: Any = None,
                  mask: Mask | None = None, **_: Any) -> Tile:
    """on_true_tile where the affine predicate `pred` (a comparison of index expressions, e.g. a causal
    i_q >= i_k) holds, else the scalar on_false_value (GpSimd Engine)."""
    if not isinstance(pred, Mask):
        raise fail("err-operand", "nisa.affine_select: pred is a comparison of index expressions (i_p >= i_f)")
    (tile,) = nl._tile_operands([on_true_tile], "nisa.affine_select")
    keep = nl.mask_active(pred, tile.shape)
    fill = float(nl.operand_values(on_false_value)) if not isinstance(on_false_value, Tile) else None
    if fill is None:
        raise fail("err-operand", "nisa.affine_select: on_false_value is a scalar")
    return nl._apply(lambda v: np.where(keep, v, fill), [tile], "gpsimd", "nisa.affine_select", dtype, mask)


@traced("nisa.iota")
def iota(expr: Any, dtype: Any, *, mask: Mask | None = None, **_: Any) -> Tile:
    """A tile holding the values of an index expression (`nl.arange(128)[:, None] * 512 + i_f`), GpSimd."""
    from kernelrl.nki.tensors import IndexExpr

    if not isinstance(expr, IndexExpr):
        raise fail("err-operand", "nisa.iota: expr is an index expression (built from nl.arange / nl.mgrid)")
    values = expr._v if expr._v.ndim >= 2 else expr._v.reshape(-1, 1)
    out_dtype = to_dtype(dtype)
    tile = Tile(values, out_dtype, SBUF)
    if mask is not None:
        tile._data[...] = np.where(nl.mask_active(mask, tile.shape), tile._data, nl.poison(out_dtype))
    current_run().cost.charge("gpsimd", _cost.elementwise_us(math.prod(tile.shape[1:]), "gpsimd"))
    return tile


@traced("nisa.tensor_tensor")
def tensor_tensor(data1: Tile, data2: Tile, op: Any, *, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """op(data1, data2) elementwise on the Vector Engine; both operands must be tiles."""
    if not (isinstance(data1, Tile) and isinstance(data2, Tile)):
        nl._tile_operands([data1, data2], "nisa.tensor_tensor")
        raise fail("err-operand", "nisa.tensor_tensor needs two tiles; use nisa.tensor_scalar for a scalar operand")
    return nl._apply(_np_of(op, "nisa.tensor_tensor"), [data1, data2], "vector", "nisa.tensor_tensor", dtype, mask)


@traced("nisa.tensor_scalar")
def tensor_scalar(
    data: Tile, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
    reverse1: bool = False, *, dtype: Any = None, mask: Mask | None = None, **_: Any,
) -> Tile:
    """(data op0 operand0) op1 operand1 on the Vector Engine; operands: scalars or [P, 1] tiles."""
    f0 = _binary_np_of(op0, "nisa.tensor_scalar")
    f1 = _binary_np_of(op1, "nisa.tensor_scalar") if op1 is not None else None

    def fn(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = f0(a, x) if reverse0 else f0(x, a)
        if f1 is not None:
            y = f1(b, y) if reverse1 else f1(y, b)
        return y

    operands = [data, operand0, 0.0 if operand1 is None else operand1]
    return nl._apply(fn, operands, "vector", "nisa.tensor_scalar", dtype, mask)


@traced("nisa.tensor_tensor_scan")
def tensor_tensor_scan(
    data0: Tile, data1: Tile, initial: Any, op0: Any, op1: Any, reverse0: bool = False, reverse1: bool = False,
    *, dtype: Any = None, mask: Mask | None = None, **_: Any,
) -> Tile:
    """A scan along the free axis (Vector Engine): out[:, i] = (data0[:, i] op0 out[:, i-1]) op1 data1[:, i],
    with out[:, -1] = `initial` (a scalar or a [P, 1] tile); 2-D tiles of the same shape."""
    f0, f1 = _np_of(op0, "nisa.tensor_tensor_scan"), _np_of(op1, "nisa.tensor_tensor_scan")
    a, b = nl._tile_operands([data0, data1], "nisa.tensor_tensor_scan")
    if a.shape != b.shape or a.ndim != 2:
        raise fail("err-shape-mismatch", f"nisa.tensor_tensor_scan: data0 {a.shape} and data1 {b.shape} must be 2-D tiles "
                   "of one shape")
    with covered_by(mask):
        x, y = nl.operand_values(a).astype(np.float64), nl.operand_values(b).astype(np.float64)
    carry = np.broadcast_to(nl.operand_values(initial) if isinstance(initial, Tile) else np.asarray(float(initial)),
                            (a.shape[0], 1)).reshape(a.shape[0]).astype(np.float64)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        for i in range(a.shape[1]):
            step = f0(carry, x[:, i]) if reverse0 else f0(x[:, i], carry)
            carry = f1(y[:, i], step) if reverse1 else f1(step, y[:, i])
            out[:, i] = carry
    if mask is not None:
        out = np.where(nl.mask_active(mask, out.shape), out, nl.poison(to_dtype(dtype) if dtype is not None else a.dtype))
    current_run().cost.charge("vector", _cost.elementwise_us(2 * a.shape[1], "vector"))
    return Tile(out, to_dtype(dtype) if dtype is not None else a.dtype, SBUF)


@traced("nisa.tensor_reduce")
def tensor_reduce(
    op: Any, data: Tile, axis: Any, *, dtype: Any = None, negate: bool = False, keepdims: bool = False,
    mask: Mask | None = None,
) -> Tile:
    """Reduce free axes with op (nl.add, nl.maximum, nl.minimum, nl.multiply) on the Vector Engine."""
    fn = _np_of(op, "nisa.tensor_reduce")
    if fn not in _REDUCERS or op is nl.mean:
        raise fail("err-unsupported-op", f"nisa.tensor_reduce: unsupported reduce op {op!r}")
    reducer = {np.sum: nl.sum, np.max: nl.max, np.min: nl.min, np.prod: nl.prod}[_REDUCERS[fn]]
    out = reducer(data, axis, dtype=dtype, keepdims=keepdims, mask=mask)
    if negate:
        out._data = -out._data
    return out


@traced("nisa.tensor_copy")
def tensor_copy(src: Tile, *, dtype: Any = None, mask: Mask | None = None, **_: Any) -> Tile:
    """Copy a tile (PSUM or SBUF) into a new SBUF tile on the Vector Engine."""
    return nl.copy(src, dtype=dtype, mask=mask)


@traced("nisa.memset")
def memset(shape: Any, value: float, dtype: Any, **_: Any) -> Tile:
    """A new SBUF tile filled with `value` (GpSimd Engine)."""
    current_run()
    return nl.full(shape, value, to_dtype(dtype))  # type: ignore[return-value]


BN_STATS_FMAX = 512


@traced("nisa.bn_stats")
def bn_stats(data: Tile, *, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    """Per-partition (count, mean, variance * count) of the even and of the odd free elements: [P, 6]
    (Vector Engine, fp32; at most `nl.tile_size.bn_stats_fmax` = 512 free elements)."""
    (tile,) = nl._tile_operands([data], "nisa.bn_stats")
    with covered_by(mask):
        values = nl.operand_values(tile).astype(np.float64).reshape(tile.shape[0], -1)
    if values.shape[1] > BN_STATS_FMAX:
        raise fail("err-bn-stats-fmax", f"nisa.bn_stats: free size {values.shape[1]} exceeds bn_stats_fmax ({BN_STATS_FMAX})")
    active = (np.ones(values.shape, bool) if mask is None
              else nl.mask_active(mask, tile.shape).reshape(values.shape))  # masked-out elements are not counted
    parts = []
    for half, live in ((values[:, 0::2], active[:, 0::2]), (values[:, 1::2], active[:, 1::2])):
        count = live.sum(axis=1).astype(np.float64)
        kept = np.where(live, half, 0.0)
        mean = kept.sum(axis=1) / np.maximum(count, 1.0)
        m2 = np.where(live, (half - mean[:, None]) ** 2, 0.0).sum(axis=1)
        parts += [count, mean, m2]
    current_run().cost.charge("vector", _cost.elementwise_us(values.shape[1], "vector"))
    return Tile(np.stack(parts, axis=1), to_dtype(dtype) if dtype is not None else float32, SBUF)


@traced("nisa.bn_aggr")
def bn_aggr(data: Tile, *, mask: Mask | None = None, dtype: Any = None, **_: Any) -> Tile:
    """Mean and variance per partition ([P, 2]) from one or more bn_stats outputs (triples per partition)."""
    (tile,) = nl._tile_operands([data], "nisa.bn_aggr")
    values = nl.operand_values(tile).astype(np.float64).reshape(tile.shape[0], -1)
    if values.shape[1] % 3:
        raise fail("err-bn-aggr-shape", f"nisa.bn_aggr: {values.shape[1]} elements per partition is not a multiple of 3")
    triples = values.reshape(tile.shape[0], -1, 3)
    count, mean, m2 = triples[..., 0], triples[..., 1], triples[..., 2]
    total = np.maximum(count.sum(axis=1), 1.0)
    grand = (count * mean).sum(axis=1) / total
    var = (m2.sum(axis=1) + (count * (mean - grand[:, None]) ** 2).sum(axis=1)) / total
    current_run().cost.charge("vector", _cost.elementwise_us(max(64, 13 * values.shape[1] // 3), "vector"))
    return Tile(np.stack([grand, var], axis=1), to_dtype(dtype) if dtype is not None else tile.dtype, SBUF)


@traced("nisa.dma_copy")
def dma_copy(*, dst: Any, src: Any, mask: Mask | None = None, **_: Any) -> None:
    """Copy `src` into `dst` on a DMA queue: HBM <-> SBUF, SBUF -> SBUF or HBM -> HBM."""
    run = current_run()
    if isinstance(src, HbmTensor | HbmView):
        dtype = dst.dtype if isinstance(dst, Tile) else src.dtype
        values, nbytes = nl.read_hbm(src, mask, dtype, "nisa.dma_copy")
        value = Tile(values, src.dtype, SBUF, allocate=False)
    elif isinstance(src, Tile):
        value, nbytes = src, int(np.prod(src.shape)) * src.dtype.itemsize
    else:
        raise fail("err-dma-operand", f"nisa.dma_copy: src must be an HBM tensor or a tile, got {type(src).__name__}")
    if isinstance(dst, HbmTensor | HbmView):
        nbytes = nl.write_hbm(dst, value, mask, "nisa.dma_copy")
    elif isinstance(dst, Tile):
        if dst.buffer != SBUF or dst.shape != value.shape:
            raise fail("err-dma-operand", f"nisa.dma_copy: an on-chip dst must be an SBUF tile of the src's shape "
                       f"{value.shape}, got {dst.buffer.upper()} {dst.shape}")
        dst._data[...] = cast(nl.operand_values(value), dst.dtype)
        run.wrote(dst._stamps, ...)
    else:
        raise fail("err-dma-operand", f"nisa.dma_copy: dst must be an HBM tensor or an SBUF tile, got {type(dst).__name__}")
    run.cost.charge("dma", _cost.dma_us(nbytes), nbytes=nbytes)


reduce_cmd = reduce_cmd_names
