"""Dtypes, index expressions and masks, HBM tensors and on-chip tiles, and the state of the kernel being
interpreted (live SBUF bytes and PSUM banks per partition, the instruction trace, affine-loop stamps).

Tiles and HBM tensors are opaque handles to candidate code: their values live in private attributes that
an NKI candidate may not name (the backend's static check refuses `_`-prefixed attributes), they have no
`__array__`, `__bool__`, `__float__` or iteration, and the numbers only ever flow through NKI instructions.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelrl.nki.cost import CostReport
from kernelrl.nki.rules import PMAX, PSUM_BANK_BYTES, PSUM_BANKS, PSUM_FMAX, SBUF_BYTES_PER_PARTITION, fail

SBUF, PSUM, HBM = "sbuf", "psum", "hbm"
_HANDLES = itertools.count(1)


@dataclass(frozen=True)
class DType:
    """An NKI dtype: its name, the numpy dtype that stores it here, and its size on the device."""

    name: str
    storage: Any
    itemsize: int
    is_float: bool

    def __repr__(self) -> str:
        return f"nl.{self.name}"


float32 = DType("float32", np.float32, 4, True)
bfloat16 = DType("bfloat16", np.float32, 2, True)  # stored as fp32, rounded to bf16 on every write
float16 = DType("float16", np.float16, 2, True)
int32 = DType("int32", np.int32, 4, False)
int16 = DType("int16", np.int16, 2, False)
int8 = DType("int8", np.int8, 1, False)
uint8 = DType("uint8", np.uint8, 1, False)
bool_ = DType("bool_", np.uint8, 1, False)
DTYPES = {d.name: d for d in (float32, bfloat16, float16, int32, int16, int8, uint8, bool_)}
_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float16): float16, np.dtype(np.int32): int32,
          np.dtype(np.int16): int16, np.dtype(np.int8): int8, np.dtype(np.uint8): uint8,
          np.dtype(np.float64): float32, np.dtype(np.int64): int32, np.dtype(np.bool_): bool_}


def to_dtype(value: Any) -> DType:
    """An NKI dtype from a DType, its name, a numpy-facade dtype, a numpy dtype or a torch dtype."""
    if isinstance(value, DType):
        return value
    name = getattr(value, "nki_dtype", None) or str(value).removeprefix("torch.")
    if name in DTYPES:
        return DTYPES[name]
    try:
        return _NUMPY[np.dtype(value)]
    except (TypeError, KeyError):
        raise fail("err-unsupported-dtype", f"unsupported dtype {value!r}; use one of {sorted(DTYPES)}") from None


def _round_bf16(values: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), rounded)


def cast(values: Any, dtype: DType) -> np.ndarray:
    """`values` converted to `dtype` (bf16: round to nearest even, kept in fp32 storage)."""
    arr = np.asarray(values)
    if dtype is bfloat16:
        return _round_bf16(arr)
    if not dtype.is_float and arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            arr = np.trunc(np.nan_to_num(arr, nan=0.0))
    return arr.astype(dtype.storage, copy=True)


def poison(dtype: DType) -> Any:
    """What a masked-out lane of a load holds: undefined on hardware, NaN (floats) or the max value here."""
    return np.nan if dtype.is_float else np.iinfo(dtype.storage).max


# ---------------------------------------------------------------- index expressions and masks


class Mask:
    """A boolean predicate over an access pattern, built by comparing index expressions."""

    def __init__(self, values: Any) -> None:
        self._v = np.asarray(values, dtype=bool)
        self._h = next(_HANDLES)

    def __and__(self, other: Mask) -> Mask:
        return _traced_op("Mask.__and__")(self, other)

    __rand__ = __and__

    def __or__(self, other: Mask) -> Mask:
        return _traced_op("Mask.__or__")(self, other)

    __ror__ = __or__

    def __invert__(self) -> Mask:
        return _traced_op("Mask.__invert__")(self)

    def __bool__(self) -> bool:
        raise fail("err-mask-bool", "a mask is a predicate over a tile; combine masks with & and |, not and/or/if")


def _mask_and(a: Mask, b: Any) -> Mask:
    return Mask(a._v & _mask_values(b))


def _mask_or(a: Mask, b: Any) -> Mask:
    return Mask(a._v | _mask_values(b))


def _mask_invert(a: Mask) -> Mask:
    return Mask(~a._v)


def mask_active(mask: Mask, shape: tuple[int, ...]) -> np.ndarray:
    """Which elements of an instruction's output of `shape` a `mask=` predicate lets it compute."""
    try:
        return np.broadcast_to(_mask_values(mask), shape)
    except ValueError:
        raise fail("err-shape-mismatch", f"a mask of shape {_mask_values(mask).shape} does not cover a tile of shape {shape}") from None


def _mask_values(other: Any) -> np.ndarray:
    if isinstance(other, Mask):
        return other._v
    if isinstance(other, bool):
        return np.asarray(other)
    raise fail("err-mask", f"a mask combines with another mask, not {type(other).__name__}")


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal}
_ARITH = {"add": np.add, "sub": np.subtract, "rsub": lambda a, b: np.subtract(b, a), "mul": np.multiply,
          "floordiv": np.floor_divide, "mod": np.mod}


def index_arith(expr: IndexExpr, other: Any, op: str) -> Any:
    """`expr <op> other` for an index expression: integer arithmetic, or a comparison giving a Mask."""
    if isinstance(other, IndexExpr):
        rhs: Any = other._v
    elif isinstance(other, int | np.integer) and not isinstance(other, bool):
        rhs = int(other)
    else:
        raise fail("err-index-expr", f"index arithmetic needs integers, got {type(other).__name__}")
    if op in _CMP:
        return Mask(_CMP[op](expr._v, rhs))
    return IndexExpr(_ARITH[op](expr._v, rhs))


class IndexExpr:
    """Integer index values (from nl.arange / nl.mgrid and arithmetic on them) with a broadcast shape."""

    def __init__(self, values: Any) -> None:
        self._v = np.asarray(values, dtype=np.int64)
        self._h = next(_HANDLES)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._v.shape)

    def __getitem__(self, key: Any) -> IndexExpr:
        return _traced_op("IndexExpr.__getitem__")(self, key)

    def _op(name: str) -> Callable[..., Any]:  # type: ignore[misc]
        def method(self: IndexExpr, other: Any) -> Any:
            return _traced_op("IndexExpr." + name)(self, other)

        return method

    __add__ = __radd__ = _op("add")
    __sub__ = _op("sub")
    __rsub__ = _op("rsub")
    __mul__ = __rmul__ = _op("mul")
    __floordiv__ = _op("floordiv")
    __mod__ = _op("mod")
    __lt__, __le__, __gt__, __ge__ = _op("lt"), _op("le"), _op("gt"), _op("ge")
    __eq__, __ne__ = _op("eq"), _op("ne")  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise fail("err-index-bool", "an index expression has no truth value while a kernel is traced")


def _index_getitem(expr: IndexExpr, key: Any) -> IndexExpr:
    return IndexExpr(expr._v[key])


def _is_int(key: Any) -> bool:
    return isinstance(key, int | np.integer) and not isinstance(key, bool)


@dataclass
class Access:
    """A resolved access pattern: one broadcastable index array per tensor dim and the result shape."""

    arrays: list[np.ndarray]
    shape: tuple[int, ...]
    active: np.ndarray | None = None  # mask broadcast to `shape`; None = every element

    def with_mask(self, mask: Mask | None) -> Access:
        if mask is None:
            return self
        values = _mask_values(mask)
        try:
            active = np.broadcast_to(values, self.shape)
        except ValueError:
            raise fail(
                "err-mask-shape", f"mask of shape {values.shape} does not match the access shape {self.shape}"
            ) from None
        return Access(self.arrays, self.shape, active)

    def count(self) -> int:
        return int(self.active.sum()) if self.active is not None else math.prod(self.shape)


def _normalise_key(shape: tuple[int, ...], key: Any) -> tuple[Any, ...]:
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1 :]
    if len(key) > len(shape):
        raise fail("err-index-rank", f"{len(key)} indices for a tensor of rank {len(shape)} (shape {shape})")
    return key + (slice(None),) * (len(shape) - len(key))


def _slice_values(dim: int, k: slice) -> np.ndarray:
    start = 0 if k.start is None else int(k.start)
    stop = dim if k.stop is None else int(k.stop)
    step = 1 if k.step is None else int(k.step)
    if start < 0 or stop < 0 or step <= 0:
        raise fail("err-unsupported-index", f"slice {start}:{stop}:{step}: negative bounds and steps are not supported")
    return np.arange(start, stop, step, dtype=np.int64)


def resolve(shape: tuple[int, ...], key: Any) -> Access:
    """Index arrays for `tensor[key]`: ints drop a dim, slices span their own axis, index expressions
    (`nl.arange(128)[:, None]`, the outputs of `nl.mgrid`) broadcast numpy-style. With only ints and
    index expressions of rank >= 2 the result has the expressions' broadcast shape (e.g. five mgrid
    outputs indexing a 3-D tensor); a 1-D arange is refused, as NKI refuses it."""
    key = _normalise_key(shape, key)
    exprs = [k for k in key if isinstance(k, IndexExpr)]
    if any(e._v.ndim == 1 for e in exprs):
        raise fail("err-1d-arange-not-supported", "indexing a tensor with a 1-D arange is not supported; give it "
                   "an axis (nl.arange(n)[:, None] for partitions, [None, :] for the free dim) or use a slice")
    slices = [k for k in key if isinstance(k, slice)]
    n_out = sum(not _is_int(k) for k in key)
    advanced = bool(exprs) and not slices and any(e._v.ndim != n_out for e in exprs)
    arrays: list[np.ndarray] = []
    axis = 0
    for dim, k in zip(shape, key, strict=True):
        if _is_int(k):
            arrays.append(np.asarray(int(k), dtype=np.int64))
            continue
        if isinstance(k, slice):
            values = _slice_values(dim, k)
            placed = [1] * n_out
            placed[axis] = values.size
            values = values.reshape(placed)
        elif isinstance(k, IndexExpr):
            values = k._v
            if not advanced and values.ndim not in (0, n_out):
                raise fail("err-index-rank", f"index expression of rank {values.ndim} in an access of rank {n_out}")
        else:
            raise fail("err-unsupported-index", f"unsupported index of type {type(k).__name__}; use ints, slices or nl.arange")
        arrays.append(values)
        axis += 1
    try:
        out = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        raise fail("err-index-shape", "index expressions do not broadcast to one tile shape") from None
    return Access(arrays, tuple(out))


def check_bounds(shape: tuple[int, ...], access: Access, what: str, hint: str = "") -> None:
    for dim_no, (dim, arr) in enumerate(zip(shape, access.arrays, strict=True)):
        bad = (arr < 0) | (arr >= dim)
        if not bad.any():
            continue
        bad_full = np.broadcast_to(bad, access.shape)
        if access.active is not None:
            bad_full = bad_full & access.active
        if bad_full.any():
            index = int(np.broadcast_to(arr, access.shape)[bad_full].flat[0])
            raise fail(
                "err-out-of-bound-access",
                f"{what}: index {index} is out of bounds for dimension {dim_no} of size {dim}{hint}",
            )


def gather(data: np.ndarray, access: Access, fill: Any = 0) -> np.ndarray:
    """The elements of an access pattern; masked-out lanes get `fill`."""
    clipped = tuple(np.clip(a, 0, max(d - 1, 0)) for a, d in zip(access.arrays, data.shape, strict=True))
    out = np.array(np.broadcast_to(data[clipped], access.shape))
    if access.active is not None:
        out[~access.active] = fill
    return out


def _full_index(access: Access) -> tuple[np.ndarray, ...]:
    full = tuple(np.broadcast_to(a, access.shape) for a in access.arrays)
    return full if access.active is None else tuple(f[access.active] for f in full)


def scatter(data: np.ndarray, access: Access, values: np.ndarray) -> None:
    vals = np.broadcast_to(values, access.shape)
    data[_full_index(access)] = vals if access.active is None else vals[access.active]


# ---------------------------------------------------------------- kernel run state


@dataclass
class AffineLoop:
    """An active `nl.affine_range` loop: the stamp its first iteration began with and the current one's."""

    begin: int
    current: int = 0


@dataclass
class KernelRun:
    """State of one interpreted kernel call: cost, live on-chip allocations, the instruction trace (None
    while the judge replays one), SPMD program and the affine loops being iterated."""

    cost: CostReport = field(default_factory=CostReport)
    sbuf_live: int = 0  # bytes per partition
    sbuf_peak: int = 0
    psum_banks_live: int = 0
    psum_banks_peak: int = 0
    trace: list[Any] | None = None
    known: set[int] = field(default_factory=set)  # handles of objects the trace can name
    depth: int = 0  # nesting of traced calls (only the outermost is recorded)
    grid: tuple[int, ...] = ()
    program: tuple[int, ...] = ()
    shared: list[Any] = field(default_factory=list)  # SPMD: shared_hbm tensors, one per allocation site
    shared_no: int = 0
    loops: list[AffineLoop] = field(default_factory=list)
    stamp: int = 0
    scratch: int = 0  # > 0 while a destination-passing instruction computes its result (not an allocation)
    covering: Any = None  # the mask= of the instruction reading its operands (covers out-of-bounds lanes)

    def allocate(self, tile: Tile) -> None:
        if self.scratch:
            return
        per_partition = math.prod(tile.shape) // max(tile.shape[tile.pdim], 1) if tile.shape else 1
        if tile.buffer == SBUF:
            nbytes = per_partition * tile.dtype.itemsize
            if self.sbuf_live + nbytes > SBUF_BYTES_PER_PARTITION:
                raise fail(
                    "err-sbuf-capacity",
                    f"SBUF overflow: live tiles need {self.sbuf_live + nbytes} bytes per partition, SBUF "
                    f"has {SBUF_BYTES_PER_PARTITION} (192 KiB); use smaller tiles or fewer live tiles",
                )
            self.sbuf_live += nbytes
            self.sbuf_peak = max(self.sbuf_peak, self.sbuf_live)
            weakref.finalize(tile, self._release, SBUF, nbytes, tile._h)
        elif tile.buffer == PSUM:
            blocks = math.prod(tile.shape[: tile.pdim])
            free = math.prod(tile.shape[tile.pdim + 1 :])
            banks = blocks * max(1, math.ceil(free * 4 / PSUM_BANK_BYTES))
            if self.psum_banks_live + banks > PSUM_BANKS:
                raise fail(
                    "err-psum-capacity",
                    f"PSUM overflow: live PSUM tiles need {self.psum_banks_live + banks} banks, PSUM has "
                    f"{PSUM_BANKS} banks of {PSUM_BANK_BYTES} bytes per partition",
                )
            self.psum_banks_live += banks
            self.psum_banks_peak = max(self.psum_banks_peak, self.psum_banks_live)
            weakref.finalize(tile, self._release, PSUM, banks, tile._h)

    def _release(self, buffer: str, amount: int, handle: int) -> None:
        if buffer == SBUF:
            self.sbuf_live -= amount
        else:
            self.psum_banks_live -= amount
        if self.trace is not None and handle in self.known:
            self.trace.append(["free", handle])

    # -- affine_range loop-carried dependencies: every write inside an affine loop stamps its elements

    def stamps_for(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, dtype=np.int64)

    def wrote(self, stamps: np.ndarray, index: Any) -> None:
        if self.loops:
            stamps[index] = self.stamp

    def check_read(self, stamps: np.ndarray, index: Any, what: str) -> None:
        if not self.loops:
            return
        seen = stamps[index]
        for loop in self.loops:
            if np.any((seen >= loop.begin) & (seen < loop.current)):
                raise fail(
                    "err-loop-carried-dependency",
                    f"{what} reads a value written by an earlier iteration of an nl.affine_range loop; iterations "
                    "of affine_range must be independent (accumulate with +=, or use nl.sequential_range)",
                )


_RUN: ContextVar[KernelRun | None] = ContextVar("nki_kernel_run", default=None)


def current_run() -> KernelRun:
    run = _RUN.get()
    if run is None:
        raise fail("err-outside-kernel", "NKI language call outside an @nki.jit kernel")
    return run


def _traced_op(name: str) -> Callable[..., Any]:
    from kernelrl.nki.trace import OPS

    return OPS[name]


# ---------------------------------------------------------------- tensors


class _Opaque:
    """What every NKI value refuses: host conversion, truth values and iteration."""

    def _no_host(self, *_: Any, **__: Any) -> Any:
        raise fail("err-host-access", f"{type(self).__name__} values exist only on the device; a kernel computes "
                   "on them with NKI instructions and never reads them on the host")

    __array__ = __bool__ = __float__ = __int__ = __index__ = __iter__ = __len__ = _no_host  # type: ignore[assignment]
    __reduce__ = __reduce_ex__ = __copy__ = __deepcopy__ = _no_host  # type: ignore[assignment]


class _HbmOperand(_Opaque):
    """HBM operands reject compute: an engine reads only SBUF/PSUM tiles."""

    shape: tuple[int, ...]

    def _no_compute(self, *_: Any) -> Any:
        raise fail(
            "err-compute-on-hbm",
            f"compute on an HBM tensor of shape {self.shape}: engines read SBUF/PSUM tiles; nl.load it first",
        )

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_compute
    __truediv__ = __rtruediv__ = __neg__ = __pow__ = _no_compute


class HbmTensor(_HbmOperand):
    """A tensor in device memory (HBM): kernel arguments and outputs; indexing gives an `HbmView`."""

    buffer = HBM

    def __init__(self, data: np.ndarray, dtype: DType, name: str = "", stamps: np.ndarray | None = None) -> None:
        self._data, self.dtype, self.name = data, dtype, name
        self._stamps = stamps if stamps is not None else np.zeros(data.shape, dtype=np.int64)
        self._h = next(_HANDLES)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def __getitem__(self, key: Any) -> HbmView:
        return _traced_op("HbmTensor.__getitem__")(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise fail("err-hbm-assign", "an HBM tensor cannot be assigned by indexing; use nl.store(dst, value=tile)")

    def reshape(self, shape: Any) -> HbmTensor:
        return _traced_op("HbmTensor.reshape")(self, shape)

    def __repr__(self) -> str:
        return f"HbmTensor(shape={self.shape}, dtype={self.dtype})"


def _hbm_getitem(t: HbmTensor, key: Any) -> HbmView:
    return HbmView(t, resolve(t.shape, _tile_indices(key)))


def _tile_indices(key: Any) -> Any:
    """Indirect DMA: a [P, 1] integer SBUF tile in an HBM access (`x[idx_tile, i_f]`) indexes with its values
    (read as the tile holds them when the access is made)."""
    parts = key if isinstance(key, tuple) else (key,)
    if not any(isinstance(k, Tile) for k in parts):
        return key
    out = []
    for k in parts:
        if isinstance(k, Tile):
            if k.dtype.is_float or k.ndim != 2 or k.shape[1] != 1:
                raise fail("err-indirect-index", f"an index tile is an integer tile of shape [P, 1], got {k.dtype} "
                           f"{k.shape}")
            k = IndexExpr(operand_values(k).astype(np.int64))
        out.append(k)
    return tuple(out)


def _hbm_reshape(t: HbmTensor, shape: Any) -> HbmTensor:
    shape = tuple(int(s) for s in ((shape,) if isinstance(shape, int) else shape))
    if math.prod(shape) != t._data.size:
        raise fail("err-reshape", f"cannot reshape HBM tensor of shape {t.shape} to {shape}")
    return HbmTensor(t._data.reshape(shape), t.dtype, t.name, t._stamps.reshape(shape))


class HbmView(_HbmOperand):
    """An access pattern into an HBM tensor; nl.load reads it, nl.store writes it."""

    buffer = HBM

    def __init__(self, base: HbmTensor, access: Access) -> None:
        self._base, self._access = base, access
        self._h = next(_HANDLES)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._access.shape

    @property
    def dtype(self) -> DType:
        return self._base.dtype


def hbm_access(target: Any, what: str) -> tuple[HbmTensor, Access]:
    if isinstance(target, HbmView):
        return target._base, target._access
    if isinstance(target, HbmTensor):
        return target, resolve(target.shape, ())
    kind = getattr(target, "buffer", type(target).__name__)
    raise fail("err-unsupported-memory", f"{what} expects an HBM tensor, got {kind}")


def _basic_key(key: Any) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    return all(_is_int(k) or isinstance(k, slice) or k is Ellipsis for k in parts)


class Tile(_Opaque):
    """An on-chip tile in SBUF or PSUM. Axis `pdim` is the partition dim (at most 128; axis 0 unless
    `nl.par_dim` placed it after block dims), the axes after it are free."""

    __array_priority__ = 1000  # numpy scalars defer to Tile's operators

    def __init__(self, data: Any, dtype: DType, buffer: str = SBUF, allocate: bool = True, pdim: int = 0) -> None:
        data = np.asarray(data)
        if data.ndim > pdim and data.shape[pdim] > PMAX:
            raise fail(
                "err-partition-dim",
                f"partition dimension {data.shape[pdim]} of a {buffer.upper()} tile of shape {tuple(data.shape)} "
                f"exceeds nl.tile_size.pmax ({PMAX})",
            )
        if buffer == PSUM:
            free = math.prod(data.shape[pdim + 1 :]) if data.ndim > pdim else 1
            if free > PSUM_FMAX:
                raise fail(
                    "err-psum-free-size",
                    f"PSUM tile of shape {tuple(data.shape)} has free size {free}, over nl.tile_size.psum_fmax "
                    f"({PSUM_FMAX} fp32 elements, one 2 KiB bank per partition)",
                )
        self._data, self.dtype, self.buffer, self.pdim = cast(data, dtype), dtype, buffer, pdim
        self._stamps = np.zeros(self._data.shape, dtype=np.int64)
        self._h = next(_HANDLES)
        self._acc = False
        self._open = np.zeros(self._data.shape, dtype=bool)  # elements whose last write was a matmul
        self._origin: tuple[Tile, Access] | None = None  # a gathered copy: the tile and access it reads
        self._oob: np.ndarray | None = None  # gathered lanes outside the source tile: an instruction's mask must cover them
        self._reduce_with: Callable[..., np.ndarray] | None = None  # nl.loop_reduce: combine into the destination
        if allocate:
            current_run().allocate(self)

    @classmethod
    def view(cls, parent: Tile, key: Any) -> Tile:
        """A view sharing the parent's memory (basic indexing with ints and slices)."""
        key = _normalise_key(parent.shape, key)
        for dim, k in zip(parent.shape, key, strict=True):
            if _is_int(k) and not 0 <= int(k) < dim:
                raise fail("err-out-of-bound-access", f"index {int(k)} is out of bounds for a dimension of size {dim}")
            if isinstance(k, slice):
                _slice_values(dim, k)
                if k.stop is not None and int(k.stop) > dim:
                    raise fail("err-out-of-bound-access", f"slice stop {int(k.stop)} is out of bounds for a dimension of size {dim}")
        tile = cls.__new__(cls)
        tile._data, tile._stamps, tile._open = parent._data[key], parent._stamps[key], parent._open[key]
        tile.dtype, tile.buffer, tile._h, tile._acc = parent.dtype, parent.buffer, next(_HANDLES), False
        tile._origin, tile._reduce_with = None, None
        tile._oob = parent._oob[key] if parent._oob is not None else None
        kept = [i for i, k in enumerate(key) if not _is_int(k)]
        tile.pdim = kept.index(parent.pdim) if parent.pdim in kept else 0
        return tile

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def __repr__(self) -> str:
        return f"Tile(shape={self.shape}, dtype={self.dtype}, buffer={self.buffer})"

    def __getitem__(self, key: Any) -> Tile:
        return _traced_op("Tile.__getitem__")(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        _traced_op("Tile.__setitem__")(self, key, value)

    def __iadd__(self, other: Any) -> Tile:
        return _traced_op("Tile.__iadd__")(self, other)

    def broadcast_to(self, shape: Any) -> Tile:
        return _traced_op("Tile.broadcast_to")(self, shape)

    def _binary(name: str, reverse: bool = False) -> Callable[..., Tile]:  # type: ignore[misc]
        def method(self: Tile, other: Any) -> Tile:
            from kernelrl.nki import language

            fn = getattr(language, name)
            return fn(other, self) if reverse else fn(self, other)

        return method

    __add__ = _binary("add")
    __radd__ = _binary("add", True)
    __sub__ = _binary("subtract")
    __rsub__ = _binary("subtract", True)
    __mul__ = _binary("multiply")
    __rmul__ = _binary("multiply", True)
    __truediv__ = _binary("divide")
    __rtruediv__ = _binary("divide", True)
    __pow__ = _binary("power")

    def __neg__(self) -> Tile:
        from kernelrl.nki.language import negative

        return negative(self)


def _tile_getitem(tile: Tile, key: Any) -> Tile:
    what = f"{tile.buffer.upper()} tile of shape {tile.shape}"
    if _basic_key(key):
        view = Tile.view(tile, key)
        current_run().check_read(view._stamps, ..., what)
        return view
    access = resolve(tile.shape, key)
    oob = _out_of_bounds(tile.shape, access)
    if oob is not None:  # allowed while every instruction reading these lanes masks them out (NKI's rule)
        access = Access(access.arrays, access.shape, ~oob)
    current_run().check_read(tile._stamps, _full_index(access), what)
    out = Tile(gather(tile._data, access, poison(tile.dtype)), tile.dtype, tile.buffer, allocate=False)
    out._open = gather(tile._open, access).astype(bool)
    out._origin, out._oob = (tile, access), oob
    return out


def _out_of_bounds(shape: tuple[int, ...], access: Access) -> np.ndarray | None:
    """The elements of an access that fall outside `shape`, or None when all are inside."""
    bad = np.zeros(access.shape, dtype=bool)
    for dim, arr in zip(shape, access.arrays, strict=True):
        bad |= np.broadcast_to((arr < 0) | (arr >= dim), access.shape)
    return bad if bad.any() else None


@contextmanager
def covered_by(mask: Mask | None) -> Iterator[None]:
    """While an instruction with `mask=` reads its operands: out-of-bounds lanes it masks out are allowed."""
    run = current_run()
    previous, run.covering = run.covering, mask
    try:
        yield
    finally:
        run.covering = previous


def _tile_setitem(tile: Tile, key: Any, value: Any) -> None:
    access = resolve(tile.shape, key)
    check_bounds(tile.shape, access, f"{tile.buffer.upper()} tile of shape {tile.shape}")
    values = operand_values(value)
    try:
        np.broadcast_to(values, access.shape)
    except ValueError:
        if not (values.ndim and access.shape and values.shape[0] == access.shape[0]
                and values.size == math.prod(access.shape)):  # `t[:, 0:1] = x[:, 7]`: same elements per partition
            raise fail("err-shape-mismatch",
                       f"cannot write a value of shape {np.shape(values)} into an access of shape {access.shape}") from None
        values = values.reshape(access.shape)
    if isinstance(value, Tile) and value._reduce_with is not None:  # `dst[...] = nl.loop_reduce(x, op, ...)`
        with np.errstate(all="ignore"):
            values = value._reduce_with(gather(tile._data, access).astype(np.float64), values)
    scatter(tile._data, access, cast(values, tile.dtype))
    scatter(tile._open, access, np.asarray(False))
    if not (isinstance(value, Tile) and value._acc):  # `t[i] += x` is an accumulation, not a carried write
        current_run().wrote(tile._stamps, _full_index(access))


def _tile_iadd(tile: Tile, other: Any) -> Tile:
    if tile.buffer == PSUM:
        if tile.dtype is not float32:
            raise fail("err-psum-accumulate-dtype", f"PSUM accumulation is in fp32; this PSUM tile is {tile.dtype}")
        values = operand_values(other)
        if np.shape(values) != tile.shape and np.ndim(values) != 0:
            raise fail("err-shape-mismatch", f"cannot accumulate shape {np.shape(values)} into PSUM tile {tile.shape}")
        tile._data += values.astype(np.float32)
    else:
        from kernelrl.nki.language import add

        tile._data[...] = cast(add(tile, other)._data, tile.dtype)
    tile._acc = True
    return tile


def _tile_broadcast_to(tile: Tile, shape: Any) -> Tile:
    shape = tuple(int(s) for s in shape)
    if tile.ndim and shape and shape[0] != tile.shape[0] and tile.shape[0] != 1:
        raise fail("err-partition-broadcast", f"broadcast_to {shape}: partition size {tile.shape[0]} cannot change")
    try:
        data = np.broadcast_to(tile._data, shape)
    except ValueError:
        raise fail("err-shape-mismatch", f"cannot broadcast a tile of shape {tile.shape} to {shape}") from None
    return Tile(data, tile.dtype, tile.buffer)


def _check_covered(value: Tile, mask: Mask | None) -> None:
    exposed = value._oob
    if mask is not None:
        try:
            exposed = exposed & np.broadcast_to(_mask_values(mask), value.shape)  # lanes it computes
        except ValueError:
            pass
    if exposed.any():
        raise fail("err-out-of-bound-access", f"an operand of shape {value.shape} was indexed out of the bounds of its "
                   "tile, and the instruction reading it has no mask= covering those lanes (mask the out-of-bounds "
                   "indices, e.g. mask=(index < size))")


def operand_values(value: Any) -> np.ndarray:
    """The numbers of a compute operand: a tile or a Python scalar (HBM operands are an error)."""
    if isinstance(value, Tile):
        if value.pdim:
            raise fail("err-block-dim", f"a tile of shape {value.shape} with block dimensions before its partition "
                       "dimension: index a block (buf[i]) before computing on it")
        run = current_run()
        if value._oob is not None:
            _check_covered(value, run.covering)
        run.check_read(value._stamps, ..., f"{value.buffer.upper()} tile of shape {value.shape}")
        value._open[...] = False  # reading a PSUM accumulation closes its group: the next matmul starts anew
        return value._data
    if isinstance(value, HbmTensor | HbmView):
        value._no_compute()
    if isinstance(value, int | float | np.number | bool):
        return np.asarray(value)
    raise fail("err-operand", f"unsupported operand of type {type(value).__name__}; expected a tile or a scalar")


def _values_for(dst: Tile, value: Tile, what: str) -> np.ndarray:
    values = operand_values(value)
    if values.shape == dst.shape:
        return values
    if values.ndim and dst.ndim and values.shape[0] == dst.shape[0] and values.size == math.prod(dst.shape):
        return values.reshape(dst.shape)
    raise fail("err-shape-mismatch", f"{what}: a result of shape {values.shape} does not fit dst of shape {dst.shape} "
               "(dst needs the same partition size and elements per partition)")


def write_into(dst: Any, value: Tile, what: str, *, accumulate: bool | None = False, matmul: bool = False) -> None:
    """Write `value` into the tile `dst` (a destination-passing instruction's result; adding where accumulating:
    True everywhere, None where the last write was a matmul) and keep its bookkeeping."""
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
