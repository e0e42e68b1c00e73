"""`nl`: the interpreted subset of `neuronxcc.nki.language` (see `kernelrl.nki` for the subset)."""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kernelrl.nki import cost as _cost
from kernelrl.nki.rules import GEMM_MOVING_FMAX, GEMM_STATIONARY_FMAX, PMAX, PSUM_FMAX, fail
from kernelrl.nki.tensors import (
    HBM,
    PSUM,
    SBUF,
    DType,
    HbmTensor,
    HbmView,
    IndexExpr,
    Mask,
    Tile,
    bfloat16,
    cast,
    check_bounds,
    current_run,
    float16,
    float32,
    gather,
    hbm_access,
    int8,
    int32,
    operand_values,
    scatter,
    to_dtype,
    uint8,
)

__all__ = [
    "abs", "add", "affine_range", "arange", "bfloat16", "ceil", "copy", "cos", "divide", "ds", "equal",
    "erf", "exp", "float16", "float32", "floor", "full", "gelu", "gelu_apprx_tanh", "greater",
    "greater_equal", "hbm", "int8", "int32", "less", "less_equal", "load", "log", "matmul", "max",
    "maximum", "mean", "mgrid", "min", "minimum", "multiply", "ndarray", "negative", "not_equal", "ones",
    "par_dim", "power", "private_hbm", "prod", "psum", "reciprocal", "relu", "rsqrt", "sbuf",
    "sequential_range", "shared_hbm", "sigmoid", "sign", "silu", "sin", "softplus", "sqrt", "square",
    "static_range", "store", "subtract", "sum", "tanh", "tile_size", "transpose", "uint8", "zeros",
]

sbuf, psum, hbm = SBUF, PSUM, HBM
shared_hbm = private_hbm = HBM


class tile_size:
    """Hardware tile-size constants (`nl.tile_size`)."""

    pmax = PMAX
    psum_fmax = PSUM_FMAX
    gemm_stationary_fmax = GEMM_STATIONARY_FMAX
    gemm_moving_fmax = GEMM_MOVING_FMAX


def par_dim(size: int) -> int:
    """Marks the partition dim in a shape; the interpreter treats it as the plain size."""
    return int(size)


def _shape(shape: Any) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not all(isinstance(s, int | np.integer) and s > 0 for s in shape):
        raise fail("err-shape", f"shape {shape} must be positive integers")
    return tuple(int(s) for s in shape)


# ---------------------------------------------------------------- indices and loops


def arange(start: int, stop: int | None = None, step: int = 1) -> IndexExpr:
    """A 1-D index expression; `nl.arange(n)[:, None]` makes a partition index, `[None, :]` a free one."""
    if stop is None:
        start, stop = 0, start
    return IndexExpr(np.arange(start, stop, step))


class _IndexGrid(tuple):
    """Result of `nl.mgrid[...]`: unpacks to index expressions; `.p` / `.x` name the first two."""

    @property
    def p(self) -> IndexExpr:
        return self[0]

    @property
    def x(self) -> IndexExpr:
        return self[1]


class _MGrid:
    def __getitem__(self, key: Any) -> _IndexGrid:
        key = key if isinstance(key, tuple) else (key,)
        return _IndexGrid(IndexExpr(v) for v in np.mgrid[key])


mgrid = _MGrid()


def ds(start: int, size: int) -> slice:
    """A dynamic slice `start : start + size`."""
    return slice(start, start + size)


def affine_range(*args: int) -> range:
    """Loop whose iterations are independent (the compiler may reorder/parallelise them)."""
    return range(*args)


def sequential_range(*args: int) -> range:
    """Loop whose iterations depend on each other (run in order)."""
    return range(*args)


def static_range(*args: int) -> range:
    """Loop fully unrolled at trace time."""
    return range(*args)


# ---------------------------------------------------------------- creation and data movement


def _fill(shape: Any, dtype: Any, buffer: str, value: float) -> HbmTensor | Tile:
    shape, dt = _shape(shape), to_dtype(dtype)
    if buffer == HBM:
        return HbmTensor(np.full(shape, value, dtype=dt.storage), dt)
    if buffer not in (SBUF, PSUM):
        raise fail("err-unsupported-memory", f"unknown buffer {buffer!r}; use nl.sbuf, nl.psum or nl.shared_hbm")
    tile = Tile(np.full(shape, value, dtype=np.float64), dt, buffer)
    current_run().cost.charge("gpsimd", _cost.elementwise_us(math.prod(shape[1:]), "gpsimd"))
    return tile


def ndarray(shape: Any, dtype: Any, buffer: str = SBUF, name: str = "") -> HbmTensor | Tile:
    """An uninitialised tensor (the interpreter fills float tensors with NaN so unwritten data shows)."""
    dt = to_dtype(dtype)
    shape = _shape(shape)
    if buffer == HBM:
        return HbmTensor(np.full(shape, np.nan if dt.is_float else 0, dtype=dt.storage), dt, name)
    if buffer not in (SBUF, PSUM):
        raise fail("err-unsupported-memory", f"unknown buffer {buffer!r}; use nl.sbuf, nl.psum or nl.shared_hbm")
    return Tile(np.full(shape, np.nan if dt.is_float else 0), dt, buffer)


def zeros(shape: Any, dtype: Any, buffer: str = SBUF, name: str = "") -> HbmTensor | Tile:
    """A zero-filled tensor (a memset instruction for on-chip tiles)."""
    return _fill(shape, dtype, buffer, 0.0)


def ones(shape: Any, dtype: Any, buffer: str = SBUF, name: str = "") -> HbmTensor | Tile:
    return _fill(shape, dtype, buffer, 1.0)


def full(shape: Any, fill_value: float, dtype: Any, buffer: str = SBUF, name: str = "") -> HbmTensor | Tile:
    return _fill(shape, dtype, buffer, fill_value)


_MASK_HINT = " (mask the ragged last tile: mask=(index < size))"


def load(src: HbmTensor | HbmView, mask: Mask | None = None, dtype: Any = None) -> Tile:
    """DMA an HBM access pattern into a new SBUF tile."""
    base, access = hbm_access(src, "nl.load")
    access = access.with_mask(mask)
    check_bounds(base.shape, access, f"nl.load from HBM tensor of shape {base.shape}", _MASK_HINT)
    tile = Tile(gather(base.data, access), to_dtype(dtype) if dtype is not None else base.dtype, SBUF)
    nbytes = access.count() * base.dtype.itemsize
    current_run().cost.charge("dma", _cost.dma_us(nbytes), nbytes=nbytes)
    return tile


def store(dst: HbmTensor | HbmView, value: Tile, mask: Mask | None = None) -> None:
    """DMA an SBUF tile into an HBM access pattern."""
    if not isinstance(dst, HbmTensor | HbmView):
        kind = getattr(dst, "buffer", type(dst).__name__)
        raise fail("err-store-target", f"nl.store writes HBM only, got a destination in {kind}")
    base, access = hbm_access(dst, "nl.store")
    if not isinstance(value, Tile):
        raise fail("err-store-value", f"nl.store needs an SBUF tile as value, got {type(value).__name__}")
    if value.buffer != SBUF:
        raise fail("err-store-value", "nl.store reads SBUF tiles; copy the PSUM tile to SBUF first (nl.copy)")
    access = access.with_mask(mask)
    try:
        np.broadcast_to(value.data, access.shape)
    except ValueError:
        raise fail("err-shape-mismatch", f"nl.store of a tile of shape {value.shape} into an access of shape {access.shape}") from None
    check_bounds(base.shape, access, f"nl.store to HBM tensor of shape {base.shape}", _MASK_HINT)
    scatter(base.data, access, cast(value.data, base.dtype))
    nbytes = access.count() * base.dtype.itemsize
    current_run().cost.charge("dma", _cost.dma_us(nbytes), nbytes=nbytes)


# ---------------------------------------------------------------- compute


def _tile_operands(operands: Sequence[Any], what: str) -> list[Tile]:
    for o in operands:
        if isinstance(o, HbmTensor | HbmView):
            o._no_compute()
    tiles = [o for o in operands if isinstance(o, Tile)]
    if not tiles:
        raise fail("err-operand", f"{what} needs at least one tile operand")
    return tiles


def _result_dtype(dtype: Any, operands: Sequence[Any]) -> DType:
    if dtype is not None:
        return to_dtype(dtype)
    tiles = [o.dtype for o in operands if isinstance(o, Tile)]
    floats = [d for d in tiles if d.is_float]
    if float32 in floats:
        return float32
    if floats:
        return floats[0]
    if any(isinstance(o, float) for o in operands):
        return float32
    return tiles[0]


def _aligned(operands: Sequence[Any], what: str) -> tuple[list[np.ndarray], tuple[int, ...]]:
    """Operand values broadcast along free dims only: partition sizes must agree."""
    tiles = [o for o in operands if isinstance(o, Tile) and o.ndim > 0]
    parts = {t.shape[0] for t in tiles}
    if len(parts) > 1:
        raise fail(
            "err-partition-broadcast",
            f"{what}: operands have partition sizes {sorted(parts)}; NKI broadcasts along free dims only",
        )
    rank = builtins.max((t.ndim for t in tiles), default=0)
    values = []
    for o in operands:
        v = operand_values(o).astype(np.float64 if operand_values(o).dtype.kind == "f" else np.int64)
        if isinstance(o, Tile) and 0 < v.ndim < rank:
            v = v.reshape(v.shape + (1,) * (rank - v.ndim))
        values.append(v)
    try:
        shape = np.broadcast_shapes(*(v.shape for v in values))
    except ValueError:
        shapes = [tuple(np.shape(v)) for v in values]
        raise fail("err-shape-mismatch", f"{what}: operand shapes {shapes} do not broadcast") from None
    return values, tuple(shape)


def _apply(
    fn: Callable[..., np.ndarray], operands: Sequence[Any], engine: str, what: str,
    dtype: Any = None, mask: Mask | None = None,
) -> Tile:
    _tile_operands(operands, what)
    values, shape = _aligned(operands, what)
    out_dtype = _result_dtype(dtype, operands)
    with np.errstate(all="ignore"):
        out = np.broadcast_to(fn(*values), shape)
    if mask is not None:
        out = np.where(np.broadcast_to(mask.values, shape), out, 0)
    tile = Tile(out, out_dtype, SBUF)
    current_run().cost.charge(engine, _cost.elementwise_us(math.prod(shape[1:]), engine))
    return tile


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray], engine: str = "scalar") -> Callable[..., Tile]:
    def op(x: Any, dtype: Any = None, mask: Mask | None = None) -> Tile:
        return _apply(fn, [x], engine, f"nl.{name}", dtype, mask)

    op.__name__ = name
    op.__doc__ = f"Elementwise `{name}` ({engine} engine)."
    op._np = fn  # type: ignore[attr-defined]
    op._engine = engine  # type: ignore[attr-defined]
    return op


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., Tile]:
    def op(x: Any, y: Any, dtype: Any = None, mask: Mask | None = None) -> Tile:
        return _apply(fn, [x, y], "vector", f"nl.{name}", dtype, mask)

    op.__name__ = name
    op.__doc__ = f"Elementwise `{name}` of two tiles or a tile and a scalar (vector engine)."
    op._np = fn  # type: ignore[attr-defined]
    return op


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in NumPy (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7): no torch operator runs, so the gym's
    op counter sees none on the kernel's behalf."""
    z = np.abs(np.asarray(x, dtype=np.float64))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-z * z))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


exp = _unary("exp", np.exp)
log = _unary("log", np.log)
tanh = _unary("tanh", np.tanh)
sigmoid = _unary("sigmoid", _sigmoid)
relu = _unary("relu", lambda x: np.maximum(x, 0))
gelu = _unary("gelu", lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))))
gelu_apprx_tanh = _unary(
    "gelu_apprx_tanh", lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
)
silu = _unary("silu", lambda x: x * _sigmoid(x))
softplus = _unary("softplus", lambda x: np.logaddexp(0.0, x))
erf = _unary("erf", _erf)
sqrt = _unary("sqrt", np.sqrt)
rsqrt = _unary("rsqrt", lambda x: 1.0 / np.sqrt(x))
negative = _unary("negative", np.negative)
abs = _unary("abs", np.abs)
square = _unary("square", np.square)
sign = _unary("sign", np.sign)
sin = _unary("sin", np.sin)
cos = _unary("cos", np.cos)
floor = _unary("floor", np.floor)
ceil = _unary("ceil", np.ceil)
reciprocal = _unary("reciprocal", lambda x: 1.0 / x, engine="vector")

add = _binary("add", np.add)
subtract = _binary("subtract", np.subtract)
multiply = _binary("multiply", np.multiply)
divide = _binary("divide", np.divide)
maximum = _binary("maximum", np.maximum)
minimum = _binary("minimum", np.minimum)
power = _binary("power", np.power)
greater = _binary("greater", lambda a, b: (a > b).astype(np.float64))
greater_equal = _binary("greater_equal", lambda a, b: (a >= b).astype(np.float64))
less = _binary("less", lambda a, b: (a < b).astype(np.float64))
less_equal = _binary("less_equal", lambda a, b: (a <= b).astype(np.float64))
equal = _binary("equal", lambda a, b: (a == b).astype(np.float64))
not_equal = _binary("not_equal", lambda a, b: (a != b).astype(np.float64))


def copy(x: Tile, dtype: Any = None, mask: Mask | None = None) -> Tile:
    """Copy a tile (e.g. PSUM -> SBUF) and optionally cast it (vector engine)."""
    return _apply(lambda v: v, [x], "vector", "nl.copy", dtype if dtype is not None else x.dtype, mask)


# ---------------------------------------------------------------- reductions


def _axes(x: Tile, axis: Any, what: str) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    if 0 in axes:
        raise fail(
            "err-partition-reduce",
            f"{what}: reducing over the partition dimension (axis 0) is not supported; reduce along free "
            "axes, or transpose first",
        )
    return axes


def _reduce(
    name: str, np_fn: Callable[..., np.ndarray], identity: float
) -> Callable[..., Tile]:
    def op(x: Tile, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Mask | None = None) -> Tile:
        what = f"nl.{name}"
        (tile,) = _tile_operands([x], what)
        axes = _axes(tile, axis, what)
        data = tile.data.astype(np.float64)
        active = None
        if mask is not None:
            active = np.broadcast_to(mask.values, tile.shape)
            data = np.where(active, data, identity)
        out = np_fn(data, axis=axes, keepdims=keepdims)
        if name == "mean":
            count = (np.sum(active, axis=axes, keepdims=keepdims) if active is not None
                     else math.prod(tile.shape[a] for a in axes))
            out = np.sum(data, axis=axes, keepdims=keepdims) / np.maximum(count, 1)
        result = Tile(out, _result_dtype(dtype, [tile]), SBUF)
        current_run().cost.charge("vector", _cost.elementwise_us(math.prod(tile.shape[1:]), "vector"))
        return result

    op.__name__ = name
    op.__doc__ = f"`{name}` along free axes `axis` (vector engine); axis 0 (partitions) is an error."
    op._np = np_fn  # type: ignore[attr-defined]
    return op


sum = _reduce("sum", np.sum, 0.0)
max = _reduce("max", np.max, -np.inf)
min = _reduce("min", np.min, np.inf)
mean = _reduce("mean", np.sum, 0.0)
prod = _reduce("prod", np.prod, 1.0)


# ---------------------------------------------------------------- tensor engine


def _sbuf_float(t: Any, what: str, role: str) -> Tile:
    (tile,) = _tile_operands([t], what)
    if tile.buffer != SBUF:
        raise fail("err-matmul-operand", f"{what}: the {role} operand must be an SBUF tile, got {tile.buffer.upper()}")
    if not tile.dtype.is_float:
        raise fail("err-matmul-dtype", f"{what}: the {role} operand is {tile.dtype}; matmul inputs must be float types")
    if tile.ndim != 2:
        raise fail("err-matmul-rank", f"{what}: the {role} operand must be a 2-D tile, got shape {tile.shape}")
    return tile


def matmul_core(stationary: Any, moving: Any, what: str) -> Tile:
    """stationary[K, M].T @ moving[K, N] -> PSUM[M, N] fp32, checked against the Tensor Engine limits."""
    s, m = _sbuf_float(stationary, what, "stationary"), _sbuf_float(moving, what, "moving")
    k, mm = s.shape
    k2, n = m.shape
    if k != k2:
        raise fail("err-matmul-contraction", f"{what}: contraction (partition) sizes differ: {k} vs {k2}")
    if mm > GEMM_STATIONARY_FMAX:
        raise fail(
            "err-matmul-stationary-fmax",
            f"{what}: stationary free size {mm} exceeds nl.tile_size.gemm_stationary_fmax ({GEMM_STATIONARY_FMAX})",
        )
    if n > GEMM_MOVING_FMAX:
        raise fail(
            "err-matmul-moving-fmax",
            f"{what}: moving free size {n} exceeds nl.tile_size.gemm_moving_fmax ({GEMM_MOVING_FMAX})",
        )
    out = s.data.astype(np.float32).T @ m.data.astype(np.float32)
    tile = Tile(out, float32, PSUM)
    fp32 = float32 in (s.dtype, m.dtype)
    current_run().cost.charge("tensor", _cost.matmul_us(n, fp32), flops=2 * k * mm * n)
    return tile


def _pe_transpose(x: Any, what: str) -> np.ndarray:
    (tile,) = _tile_operands([x], what)
    if tile.ndim != 2:
        raise fail("err-transpose-rank", f"{what}: needs a 2-D tile, got shape {tile.shape}")
    p, f = tile.shape
    if f > PMAX:
        raise fail("err-partition-dim", f"{what}: free size {f} would become a partition dimension over {PMAX}")
    current_run().cost.charge("tensor", _cost.matmul_us(p, tile.dtype is float32), flops=2 * p * p * f)
    return tile.data.T


def transpose(x: Tile, dtype: Any = None, mask: Mask | None = None) -> Tile:
    """Swap partition and free dims of a 2-D tile (Tensor Engine transpose, then PSUM -> SBUF copy)."""
    data = _pe_transpose(x, "nl.transpose")
    if mask is not None:
        data = np.where(np.broadcast_to(mask.values, data.shape), data, 0)
    tile = Tile(data, to_dtype(dtype) if dtype is not None else x.dtype, SBUF)
    current_run().cost.charge("vector", _cost.elementwise_us(data.shape[1], "vector"))
    return tile


def matmul(x: Tile, y: Tile, transpose_x: bool = False, mask: Mask | None = None) -> Tile:
    """x @ y into a new fp32 PSUM tile; x is [K, M] when `transpose_x`, else [M, K] (transposed first)."""
    if not transpose_x:
        _sbuf_float(x, "nl.matmul", "x")
        x = Tile(_pe_transpose(x, "nl.matmul (transpose of x)"), x.dtype, SBUF)
        current_run().cost.charge("vector", _cost.elementwise_us(x.shape[1], "vector"))
    return matmul_core(x, y, "nl.matmul")
