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
    _RUN,
    HBM,
    PSUM,
    SBUF,
    AffineLoop,
    DType,
    HbmTensor,
    HbmView,
    IndexExpr,
    Mask,
    Tile,
    _full_index,
    bfloat16,
    bool_,
    cast,
    check_bounds,
    covered_by,
    current_run,
    float16,
    float32,
    gather,
    hbm_access,
    int8,
    int16,
    int32,
    mask_active,
    operand_values,
    poison,
    scatter,
    to_dtype,
    uint8,
)
from kernelrl.nki.trace import ParDim, traced

__all__ = [
    "abs", "add", "affine_range", "arange", "bfloat16", "bool_", "broadcast_to", "ceil", "copy", "cos", "divide",
    "ds", "equal", "erf", "exp", "float16", "float32", "floor", "fp32", "full", "gelu", "gelu_apprx_tanh", "greater",
    "greater_equal", "hbm", "int8", "int16", "int32", "less", "less_equal", "load", "load_transpose2d", "log", "loop_reduce", "matmul", "max",
    "maximum", "mean", "mgrid", "min", "minimum", "mod", "multiply", "nc", "ndarray", "negative", "not_equal", "num_programs",
    "ones", "par_dim", "power", "private_hbm", "prod", "program_id", "program_ndim", "psum", "reciprocal", "relu",
    "rsqrt", "sbuf", "sequential_range", "shared_hbm", "sigmoid", "sign", "silu", "sin", "softplus", "spmd_dim", "sqrt",
    "square", "static_range", "store", "subtract", "sum", "tanh", "tile_size", "transpose", "uint8", "where", "zeros",
]

sbuf, psum, hbm = SBUF, PSUM, HBM
shared_hbm = private_hbm = HBM
MAX_TENSOR_ELEMENTS = 1 << 27


class tile_size:
    """Hardware tile-size constants (`nl.tile_size`)."""

    pmax = PMAX
    psum_fmax = PSUM_FMAX
    gemm_stationary_fmax = GEMM_STATIONARY_FMAX
    gemm_moving_fmax = GEMM_MOVING_FMAX
    bn_stats_fmax = 512


def par_dim(size: int) -> ParDim:
    """Marks the partition dim of an on-chip buffer's shape: `(blocks, nl.par_dim(128), free)` is `blocks`
    tiles of [128, free] (charged blocks * free elements per partition)."""
    return ParDim(int(size))


def _shape(shape: Any) -> tuple[tuple[int, ...], int]:
    """A shape and the index of its partition dim (the `par_dim` one, else 0)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not all(isinstance(s, int | np.integer) and not isinstance(s, bool) and s > 0 for s in shape):
        raise fail("err-shape", f"shape {shape} must be positive integers")
    marked = [i for i, s in enumerate(shape) if isinstance(s, ParDim)]
    if len(marked) > 1:
        raise fail("err-shape", f"shape {shape} marks {len(marked)} partition dims with nl.par_dim; mark one")
    if math.prod(int(s) for s in shape) > MAX_TENSOR_ELEMENTS:
        raise fail("err-shape", f"shape {shape} has more than {MAX_TENSOR_ELEMENTS} elements")
    return tuple(int(s) for s in shape), (marked[0] if marked else 0)


# ---------------------------------------------------------------- indices, loops and SPMD programs


@traced("nl.arange")
def arange(start: int, stop: int | None = None, step: int = 1) -> IndexExpr:
    """A 1-D index expression; `nl.arange(n)[:, None]` makes a partition index, `[None, :]` a free one."""
    if stop is None:
        start, stop = 0, start
    if (int(stop) - int(start)) // builtins.max(int(step), 1) > MAX_TENSOR_ELEMENTS:
        raise fail("err-shape", "nl.arange too long")
    return IndexExpr(np.arange(start, stop, step))


class _IndexGrid(tuple):
    """Result of `nl.mgrid[...]`: unpacks to index expressions; `.p` / `.x` name the first two."""

    @property
    def p(self) -> IndexExpr:
        return self[0]

    @property
    def x(self) -> IndexExpr:
        return self[1]


@traced("nl.mgrid")
def _mgrid(key: Any) -> _IndexGrid:
    key = key if isinstance(key, tuple) else (key,)
    if not all(isinstance(k, slice) for k in key):
        raise fail("err-unsupported-index", "nl.mgrid takes slices, e.g. nl.mgrid[0:128, 0:512]")
    sizes = [len(range(k.start or 0, k.stop, k.step or 1)) for k in key]
    if math.prod(sizes) * len(sizes) > MAX_TENSOR_ELEMENTS:
        raise fail("err-shape", "nl.mgrid too large")
    return _IndexGrid(IndexExpr(v) for v in np.mgrid[key])


class _MGrid:
    def __getitem__(self, key: Any) -> _IndexGrid:
        return _mgrid(key)


mgrid = _MGrid()


def ds(start: int, size: int) -> slice:
    """A dynamic slice `start : start + size`."""
    return slice(start, start + size)


class _AffineRange:
    """`nl.affine_range`: iterations must be independent. Inside a kernel, every write made in an iteration
    stamps its elements; reading an element an earlier iteration wrote (other than by `+=`) is a
    loop-carried dependency, which NKI leaves undefined and the interpreter refuses."""

    def __init__(self, args: tuple[int, ...]) -> None:
        self.range = range(*args)

    def __len__(self) -> int:
        return len(self.range)

    def __iter__(self) -> Any:
        run = _RUN.get()
        if run is None:
            yield from self.range
            return
        run.stamp += 1
        loop = AffineLoop(begin=run.stamp)
        run.loops.append(loop)
        try:
            for i in self.range:
                run.stamp += 1
                loop.current = run.stamp
                yield i
        finally:
            run.loops.remove(loop)


def affine_range(*args: int) -> Any:
    """Loop whose iterations are independent (the compiler may reorder/parallelise them)."""
    return _AffineRange(args)


def sequential_range(*args: int) -> range:
    """Loop whose iterations depend on each other (run in order)."""
    return range(*args)


def static_range(*args: int) -> range:
    """Loop fully unrolled at trace time."""
    return range(*args)


def program_id(axis: int) -> int:
    """Index of this SPMD program along launch-grid axis `axis` (`kernel[grid](...)`)."""
    run = current_run()
    if not 0 <= int(axis) < builtins.max(len(run.grid), 1):
        raise fail("err-program-axis", f"nl.program_id({axis}) outside a launch grid of rank {len(run.grid)}")
    return run.program[int(axis)] if run.program else 0


def nc(count: int) -> int:
    """`nl.nc(n)`: n NeuronCores, for a launch-grid axis `nl.spmd_dim(size, nl.nc(n))`."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise fail("err-launch-grid", f"nl.nc({count!r}): a core count is a positive int")
    return count


def spmd_dim(*sizes: int) -> int:
    """A launch-grid axis spread over cores: `nl.spmd_dim(n, nl.nc(2))` is an axis of n * 2 programs (core c
    runs the programs whose index along it is c modulo 2). Here the programs run in order on one interpreter,
    and the cost estimate adds them up as if one core ran them all."""
    if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise fail("err-launch-grid", f"nl.spmd_dim{sizes!r}: sizes are positive ints")
    return math.prod(sizes)


def num_programs(axis: int | None = None) -> int:
    """Size of the launch grid along `axis` (all programs when None)."""
    grid = current_run().grid or (1,)
    return math.prod(grid) if axis is None else grid[int(axis)]


def program_ndim() -> int:
    """Rank of the launch grid."""
    return len(current_run().grid)


@traced("spmd.program")
def begin_program(index: Any) -> None:
    """Start SPMD program `index`: its shared_hbm allocations are the first program's tensors."""
    run = current_run()
    run.program, run.shared_no = tuple(int(i) for i in index), 0


# ---------------------------------------------------------------- creation and data movement


def _hbm(shape: tuple[int, ...], dt: DType, value: float, name: str) -> HbmTensor:
    run = current_run()
    if run.program and any(run.program):  # SPMD: every program shares the first program's output tensors
        if run.shared_no >= len(run.shared):
            raise fail("err-spmd-alloc", "SPMD programs must allocate the same shared_hbm tensors in the same order")
        tensor = run.shared[run.shared_no]
        run.shared_no += 1
        return tensor
    tensor = HbmTensor(np.full(shape, value, dtype=dt.storage), dt, name)
    run.shared.append(tensor)
    return tensor


def _fill(shape: Any, dtype: Any, buffer: str, value: float, name: str = "") -> HbmTensor | Tile:
    (shape, pdim), dt = _shape(shape), to_dtype(dtype)
    if buffer == HBM:
        return _hbm(shape, dt, value, name)
    if buffer not in (SBUF, PSUM):
        raise fail("err-unsupported-memory", f"unknown buffer {buffer!r}; use nl.sbuf, nl.psum or nl.shared_hbm")
    tile = Tile(np.full(shape, value, dtype=np.float64), dt, buffer, pdim=pdim)
    current_run().cost.charge("gpsimd", _cost.elementwise_us(math.prod(shape) // shape[pdim], "gpsimd"))
    return tile


@traced("nl.ndarray")
def ndarray(shape: Any, dtype: Any, buffer: str = SBUF, name: str = "") -> HbmTensor | Tile:
    """An uninitialised tensor (the interpreter fills float tensors with NaN so unwritten data shows)."""
    dt = to_dtype(dtype)
    shape, pdim = _shape(shape)
    if buffer == HBM:
        return _hbm(shape, dt, np.nan if dt.is_float else 0, name)
    if buffer not in (SBUF, PSUM):
        raise fail("err-unsupported-memory", f"unknown buffer {buffer!r}; use nl.sbuf, nl.psum or nl.shared_hbm")
    return Tile(np.full(shape, poison(dt)), dt, buffer, pdim=pdim)


@traced("nl.zeros")
def zeros(shape: Any, dtype: Any, buffer: str = SBUF, name: str = "") -> HbmTensor | Tile:
    """A zero-filled tensor (a memset instruction for on-chip tiles)."""
    return _fill(shape, dtype, buffer, 0.0, name)


@traced("nl.ones")
def ones(shape: Any, dtype: Any, buffer: str = SBUF, name: str = "") -> HbmTensor | Tile:
    return _fill(shape, dtype, buffer, 1.0, name)


@traced("nl.full")
def full(shape: Any, fill_value: float, dtype: Any, buffer: str = SBUF, name: str = "") -> HbmTensor | Tile:
    return _fill(shape, dtype, buffer, fill_value, name)


_MASK_HINT = " (mask the ragged last tile: mask=(index < size))"


def read_hbm(src: HbmTensor | HbmView, mask: Mask | None, dtype: DType, what: str) -> tuple[np.ndarray, int]:
    """The values of an HBM access pattern (masked-out lanes poisoned) and the bytes a DMA moves."""
    base, access = hbm_access(src, what)
    access = access.with_mask(mask)
    check_bounds(base.shape, access, f"{what} from HBM tensor of shape {base.shape}", _MASK_HINT)
    current_run().check_read(base._stamps, _full_index(access), f"{what} from HBM")
    return gather(base._data, access, poison(dtype)), access.count() * base.dtype.itemsize


def write_hbm(dst: HbmTensor | HbmView, value: Tile, mask: Mask | None, what: str) -> int:
    """Write a tile's values into an HBM access pattern; the bytes a DMA moves."""
    base, access = hbm_access(dst, what)
    access = access.with_mask(mask)
    values = operand_values(value)
    try:
        np.broadcast_to(values, access.shape)
    except ValueError:
        raise fail("err-shape-mismatch", f"{what} of a tile of shape {value.shape} into an access of shape {access.shape}") from None
    check_bounds(base.shape, access, f"{what} to HBM tensor of shape {base.shape}", _MASK_HINT)
    scatter(base._data, access, cast(values, base.dtype))
    current_run().wrote(base._stamps, _full_index(access))
    return access.count() * base.dtype.itemsize


@traced("nl.load")
def load(src: HbmTensor | HbmView, mask: Mask | None = None, dtype: Any = None) -> Tile:
    """DMA an HBM access pattern into a new SBUF tile; masked-out lanes hold poison (NaN for floats)."""
    out_dtype = to_dtype(dtype) if dtype is not None else hbm_access(src, "nl.load")[0].dtype
    values, nbytes = read_hbm(src, mask, out_dtype, "nl.load")
    tile = Tile(values, out_dtype, SBUF)
    current_run().cost.charge("dma", _cost.dma_us(nbytes), nbytes=nbytes)
    return tile


@traced("nl.load_transpose2d")
def load_transpose2d(src: HbmTensor | HbmView, mask: Mask | None = None, dtype: Any = None) -> Tile:
    """DMA a 2-D HBM access [F, P] into a new SBUF tile [P, F] (transposed on the way; masked-out lanes poison)."""
    out_dtype = to_dtype(dtype) if dtype is not None else hbm_access(src, "nl.load_transpose2d")[0].dtype
    values, nbytes = read_hbm(src, mask, out_dtype, "nl.load_transpose2d")
    if values.ndim != 2:
        raise fail("err-transpose-rank", f"nl.load_transpose2d: needs a 2-D access, got shape {values.shape}")
    tile = Tile(values.T, out_dtype, SBUF)
    current_run().cost.charge("dma", _cost.dma_us(nbytes), nbytes=nbytes)
    return tile


@traced("nl.store")
def store(dst: HbmTensor | HbmView, value: Tile, mask: Mask | None = None) -> None:
    """DMA an SBUF tile into an HBM access pattern (a PSUM tile is first copied to SBUF, as NKI does)."""
    if not isinstance(dst, HbmTensor | HbmView):
        kind = getattr(dst, "buffer", type(dst).__name__)
        raise fail("err-store-target", f"nl.store writes HBM only, got a destination in {kind}")
    if not isinstance(value, Tile):
        raise fail("err-store-value", f"nl.store needs an SBUF or PSUM tile as value, got {type(value).__name__}")
    if value.buffer == PSUM:  # documented: the compiler inserts the PSUM -> SBUF copy
        current_run().cost.charge("vector", _cost.elementwise_us(math.prod(value.shape[1:]), "vector"))
    nbytes = write_hbm(dst, value, mask, "nl.store")
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
    with covered_by(mask):
        values, shape = _aligned(operands, what)
    out_dtype = _result_dtype(dtype, operands)
    with np.errstate(all="ignore"):
        out = np.broadcast_to(fn(*values), shape)
    if mask is not None:
        out = np.where(mask_active(mask, shape), out, poison(out_dtype))
    tile = Tile(out, out_dtype, SBUF)
    current_run().cost.charge(engine, _cost.elementwise_us(math.prod(shape[1:]), engine))
    return tile


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray], engine: str = "scalar") -> Callable[..., Tile]:
    def op(x: Any, dtype: Any = None, mask: Mask | None = None) -> Tile:
        return _apply(fn, [x], engine, f"nl.{name}", dtype, mask)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise `{name}` ({engine} engine)."
    op._np = fn  # type: ignore[attr-defined]
    op._engine = engine  # type: ignore[attr-defined]
    return traced(f"nl.{name}")(op)


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., Tile]:
    def op(x: Any, y: Any, dtype: Any = None, mask: Mask | None = None) -> Tile:
        return _apply(fn, [x, y], "vector", f"nl.{name}", dtype, mask)

    op.__name__ = name
    op.__doc__ = f"Elementwise `{name}` of two tiles or a tile and a scalar (vector engine)."
    op.__name__ = op.__qualname__ = name
    op._np = fn  # type: ignore[attr-defined]
    return traced(f"nl.{name}")(op)


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
mod = _binary("mod", np.mod)
greater = _binary("greater", lambda a, b: (a > b).astype(np.float64))
greater_equal = _binary("greater_equal", lambda a, b: (a >= b).astype(np.float64))
less = _binary("less", lambda a, b: (a < b).astype(np.float64))
less_equal = _binary("less_equal", lambda a, b: (a <= b).astype(np.float64))
equal = _binary("equal", lambda a, b: (a == b).astype(np.float64))
not_equal = _binary("not_equal", lambda a, b: (a != b).astype(np.float64))


@traced("nl.loop_reduce")
def loop_reduce(x: Tile, op: Any, loop_indices: Any, dtype: Any = None, mask: Mask | None = None) -> Tile:
    """`dst[...] = nl.loop_reduce(x, op=np.add, loop_indices=[k])`: the assignment combines x into dst with op
    (an associative reduction over the loops named, so not a carried dependency; dst starts initialised)."""
    from kernelrl.nki.isa import _np_of

    fn = _np_of(op, "nl.loop_reduce")
    out = _apply(lambda v: v, [x], "vector", "nl.loop_reduce", dtype if dtype is not None else x.dtype, mask)
    out._reduce_with, out._acc = fn, True
    return out


@traced("nl.where")
def where(condition: Tile, x: Any, y: Any, dtype: Any = None, mask: Mask | None = None) -> Tile:
    """x where `condition` is nonzero, else y (tiles or scalars; Vector Engine)."""
    return _apply(lambda c, a, b: np.where(c != 0, a, b), [condition, x, y], "vector", "nl.where",
                  dtype if dtype is not None else _result_dtype(None, [x, y] if any(isinstance(v, Tile) for v in (x, y))
                                                                 else [condition]), mask)


class fp32:
    """`nl.fp32`: limits of float32 (`nl.fp32.min` is the most negative finite value, as in the tutorials)."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)
    tiny = float(np.finfo(np.float32).tiny)
    eps = float(np.finfo(np.float32).eps)


@traced("nl.copy")
def copy(x: Tile, dtype: Any = None, mask: Mask | None = None) -> Tile:
    """Copy a tile (e.g. PSUM -> SBUF) and optionally cast it (vector engine)."""
    return _apply(lambda v: v, [x], "vector", "nl.copy", dtype if dtype is not None else x.dtype, mask)


copy._np = lambda v: v  # type: ignore[attr-defined]  # nisa.activation(op=nl.copy)


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
        with covered_by(mask):
            data = operand_values(tile).astype(np.float64)
        active = None
        if mask is not None:
            active = mask_active(mask, tile.shape)
            data = np.where(active, data, identity)
        out = np_fn(data, axis=axes, keepdims=keepdims)
        if name == "mean":
            count = (np.sum(active, axis=axes, keepdims=keepdims) if active is not None
                     else math.prod(tile.shape[a] for a in axes))
            out = np.sum(data, axis=axes, keepdims=keepdims) / np.maximum(count, 1)
        out_dtype = _result_dtype(dtype, [tile])
        if active is not None:  # an output no active element reached is not computed: poison
            out = np.where(np.any(active, axis=axes, keepdims=keepdims), out, poison(out_dtype))
        result = Tile(out, out_dtype, SBUF)
        current_run().cost.charge("vector", _cost.elementwise_us(math.prod(tile.shape[1:]), "vector"))
        return result

    op.__name__ = name
    op.__doc__ = f"`{name}` along free axes `axis` (vector engine); axis 0 (partitions) is an error."
    op.__name__ = op.__qualname__ = name
    op._np = np_fn  # type: ignore[attr-defined]
    return traced(f"nl.{name}")(op)


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
    out = operand_values(s).astype(np.float32).T @ operand_values(m).astype(np.float32)
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
    return operand_values(tile).T


@traced("nl.transpose")
def transpose(x: Tile, dtype: Any = None, mask: Mask | None = None) -> Tile:
    """Swap partition and free dims of a 2-D tile (Tensor Engine transpose, then PSUM -> SBUF copy)."""
    data = _pe_transpose(x, "nl.transpose")
    if mask is not None:
        data = np.where(mask_active(mask, data.shape), data, poison(to_dtype(dtype) if dtype is not None else x.dtype))
    tile = Tile(data, to_dtype(dtype) if dtype is not None else x.dtype, SBUF)
    current_run().cost.charge("vector", _cost.elementwise_us(data.shape[1], "vector"))
    return tile


@traced("nl.matmul")
def matmul(x: Tile, y: Tile, transpose_x: bool = False, mask: Mask | None = None) -> Tile:
    """x @ y into a new fp32 PSUM tile; x is [K, M] when `transpose_x`, else [M, K] (transposed first)."""
    if not transpose_x:
        _sbuf_float(x, "nl.matmul", "x")
        x = Tile(_pe_transpose(x, "nl.matmul (transpose of x)"), x.dtype, SBUF)
        current_run().cost.charge("vector", _cost.elementwise_us(x.shape[1], "vector"))
    return matmul_core(x, y, "nl.matmul")


@traced("nl.broadcast_to")
def broadcast_to(x: Tile, shape: Any) -> Tile:
    """`x` broadcast along its free dims to `shape` (a new SBUF tile); also `x.broadcast_to(shape)`."""
    (tile,) = _tile_operands([x], "nl.broadcast_to")
    return tile.broadcast_to(shape)
