"""Dtypes, index expressions and masks, HBM tensors and on-chip tiles, and the live-allocation
bookkeeping (SBUF bytes and PSUM banks per partition) of the kernel being interpreted."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelrl.nki.cost import CostReport
from kernelrl.nki.rules import (
    PMAX,
    PSUM_BANK_BYTES,
    PSUM_BANKS,
    PSUM_FMAX,
    SBUF_BYTES_PER_PARTITION,
    fail,
)

SBUF, PSUM, HBM = "sbuf", "psum", "hbm"


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
int8 = DType("int8", np.int8, 1, False)
uint8 = DType("uint8", np.uint8, 1, False)
DTYPES = {d.name: d for d in (float32, bfloat16, float16, int32, int8, uint8)}
_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float16): float16, np.dtype(np.int32): int32,
          np.dtype(np.int8): int8, np.dtype(np.uint8): uint8, np.dtype(np.float64): float32,
          np.dtype(np.int64): int32, np.dtype(np.bool_): uint8}


def to_dtype(value: Any) -> DType:
    """An NKI dtype from a DType, its name, a numpy dtype or a torch dtype."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    name = str(value).removeprefix("torch.")
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
        arr = np.trunc(arr)
    return arr.astype(dtype.storage, copy=True)


# ---------------------------------------------------------------- index expressions and masks


class Mask:
    """A boolean predicate over an access pattern, built by comparing index expressions."""

    def __init__(self, values: Any) -> None:
        self.values = np.asarray(values, dtype=bool)

    def __and__(self, other: Mask) -> Mask:
        return Mask(self.values & _mask_values(other))

    __rand__ = __and__

    def __or__(self, other: Mask) -> Mask:
        return Mask(self.values | _mask_values(other))

    __ror__ = __or__

    def __invert__(self) -> Mask:
        return Mask(~self.values)


def _mask_values(other: Any) -> np.ndarray:
    if isinstance(other, Mask):
        return other.values
    if isinstance(other, bool):
        return np.asarray(other)
    raise fail("err-mask", f"a mask combines with another mask, not {type(other).__name__}")


class IndexExpr:
    """Integer index values (from nl.arange / nl.mgrid and arithmetic on them) with a broadcast shape."""

    def __init__(self, values: Any) -> None:
        self.values = np.asarray(values, dtype=np.int64)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    def __getitem__(self, key: Any) -> IndexExpr:
        return IndexExpr(self.values[key])

    def _op(self, other: Any, fn: Callable[[Any, Any], Any], reverse: bool = False) -> Any:
        if isinstance(other, IndexExpr):
            rhs = other.values
        elif isinstance(other, int | np.integer):
            rhs = int(other)
        else:
            raise fail("err-index-expr", f"index arithmetic needs integers, got {type(other).__name__}")
        return fn(rhs, self.values) if reverse else fn(self.values, rhs)

    def __add__(self, o: Any) -> IndexExpr:
        return IndexExpr(self._op(o, np.add))

    __radd__ = __add__

    def __sub__(self, o: Any) -> IndexExpr:
        return IndexExpr(self._op(o, np.subtract))

    def __rsub__(self, o: Any) -> IndexExpr:
        return IndexExpr(self._op(o, np.subtract, True))

    def __mul__(self, o: Any) -> IndexExpr:
        return IndexExpr(self._op(o, np.multiply))

    __rmul__ = __mul__

    def __floordiv__(self, o: Any) -> IndexExpr:
        return IndexExpr(self._op(o, np.floor_divide))

    def __mod__(self, o: Any) -> IndexExpr:
        return IndexExpr(self._op(o, np.mod))

    def __lt__(self, o: Any) -> Mask:
        return Mask(self._op(o, np.less))

    def __le__(self, o: Any) -> Mask:
        return Mask(self._op(o, np.less_equal))

    def __gt__(self, o: Any) -> Mask:
        return Mask(self._op(o, np.greater))

    def __ge__(self, o: Any) -> Mask:
        return Mask(self._op(o, np.greater_equal))

    def __eq__(self, o: Any) -> Mask:  # type: ignore[override]
        return Mask(self._op(o, np.equal))

    def __ne__(self, o: Any) -> Mask:  # type: ignore[override]
        return Mask(self._op(o, np.not_equal))

    __hash__ = None  # type: ignore[assignment]


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


def resolve(shape: tuple[int, ...], key: Any) -> Access:
    """Index arrays for `tensor[key]`: ints drop a dim, slices and 1-D aranges span their own axis,
    multi-dim index expressions (e.g. `nl.arange(128)[:, None]`) broadcast numpy-style."""
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1 :]
    if len(key) > len(shape):
        raise fail("err-index-rank", f"{len(key)} indices for a tensor of rank {len(shape)} (shape {shape})")
    key = key + (slice(None),) * (len(shape) - len(key))
    n_out = sum(not _is_int(k) for k in key)
    arrays: list[np.ndarray] = []
    axis = 0
    for dim, k in zip(shape, key, strict=True):
        if _is_int(k):
            arrays.append(np.asarray(int(k), dtype=np.int64))
            continue
        if isinstance(k, slice):
            start = 0 if k.start is None else int(k.start)
            stop = dim if k.stop is None else int(k.stop)
            step = 1 if k.step is None else int(k.step)
            if start < 0 or stop < 0 or step <= 0:
                raise fail("err-unsupported-index", f"slice {start}:{stop}:{step}: negative bounds and steps are not supported")
            values = np.arange(start, stop, step, dtype=np.int64)
        elif isinstance(k, IndexExpr):
            values = k.values
        else:
            raise fail("err-unsupported-index", f"unsupported index of type {type(k).__name__}; use ints, slices or nl.arange")
        if values.ndim <= 1:
            placed = [1] * n_out
            placed[axis] = values.size
            values = values.reshape(placed) if values.ndim == 1 else values
        elif values.ndim != n_out:
            raise fail("err-index-rank", f"index expression of rank {values.ndim} in an access of rank {n_out}")
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


def gather(data: np.ndarray, access: Access) -> np.ndarray:
    clipped = tuple(np.clip(a, 0, max(d - 1, 0)) for a, d in zip(access.arrays, data.shape, strict=True))
    out = np.array(np.broadcast_to(data[clipped], access.shape))
    if access.active is not None:
        out[~access.active] = 0
    return out


def scatter(data: np.ndarray, access: Access, values: np.ndarray) -> None:
    full = tuple(np.broadcast_to(a, access.shape) for a in access.arrays)
    vals = np.broadcast_to(values, access.shape)
    if access.active is None:
        data[full] = vals
    else:
        data[tuple(f[access.active] for f in full)] = vals[access.active]


# ---------------------------------------------------------------- kernel run state


@dataclass
class KernelRun:
    """State of one interpreted kernel call: its cost report and live on-chip allocations."""

    cost: CostReport = field(default_factory=CostReport)
    sbuf_live: int = 0  # bytes per partition
    sbuf_peak: int = 0
    psum_banks_live: int = 0
    psum_banks_peak: int = 0

    def allocate(self, tile: Tile) -> None:
        free = math.prod(tile.shape[1:]) if tile.shape else 1
        if tile.buffer == SBUF:
            nbytes = free * tile.dtype.itemsize
            if self.sbuf_live + nbytes > SBUF_BYTES_PER_PARTITION:
                raise fail(
                    "err-sbuf-capacity",
                    f"SBUF overflow: live tiles need {self.sbuf_live + nbytes} bytes per partition, SBUF "
                    f"has {SBUF_BYTES_PER_PARTITION} (192 KiB); use smaller tiles or fewer live tiles",
                )
            self.sbuf_live += nbytes
            self.sbuf_peak = max(self.sbuf_peak, self.sbuf_live)
            weakref.finalize(tile, self._release, SBUF, nbytes)
        elif tile.buffer == PSUM:
            banks = max(1, math.ceil(free * 4 / PSUM_BANK_BYTES))
            if self.psum_banks_live + banks > PSUM_BANKS:
                raise fail(
                    "err-psum-capacity",
                    f"PSUM overflow: live PSUM tiles need {self.psum_banks_live + banks} banks, PSUM has "
                    f"{PSUM_BANKS} banks of {PSUM_BANK_BYTES} bytes per partition",
                )
            self.psum_banks_live += banks
            self.psum_banks_peak = max(self.psum_banks_peak, self.psum_banks_live)
            weakref.finalize(tile, self._release, PSUM, banks)

    def _release(self, buffer: str, amount: int) -> None:
        if buffer == SBUF:
            self.sbuf_live -= amount
        else:
            self.psum_banks_live -= amount


_RUN: ContextVar[KernelRun | None] = ContextVar("nki_kernel_run", default=None)


def current_run() -> KernelRun:
    run = _RUN.get()
    if run is None:
        raise fail("err-outside-kernel", "NKI language call outside an @nki.jit kernel")
    return run


# ---------------------------------------------------------------- tensors


class _HbmOperand:
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

    def __init__(self, data: np.ndarray, dtype: DType, name: str = "") -> None:
        self.data, self.dtype, self.name = data, dtype, name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def __getitem__(self, key: Any) -> HbmView:
        return HbmView(self, resolve(self.shape, key))

    def __setitem__(self, key: Any, value: Any) -> None:
        raise fail("err-hbm-assign", "an HBM tensor cannot be assigned by indexing; use nl.store(dst, value=tile)")

    def reshape(self, shape: tuple[int, ...]) -> HbmTensor:
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != self.data.size:
            raise fail("err-reshape", f"cannot reshape HBM tensor of shape {self.shape} to {shape}")
        return HbmTensor(self.data.reshape(shape), self.dtype, self.name)

    def __repr__(self) -> str:
        return f"HbmTensor(shape={self.shape}, dtype={self.dtype})"


class HbmView(_HbmOperand):
    """An access pattern into an HBM tensor; nl.load reads it, nl.store writes it."""

    buffer = HBM

    def __init__(self, base: HbmTensor, access: Access) -> None:
        self.base, self.access = base, access

    @property
    def shape(self) -> tuple[int, ...]:
        return self.access.shape

    @property
    def dtype(self) -> DType:
        return self.base.dtype


def hbm_access(target: Any, what: str) -> tuple[HbmTensor, Access]:
    if isinstance(target, HbmView):
        return target.base, target.access
    if isinstance(target, HbmTensor):
        return target, resolve(target.shape, ())
    kind = getattr(target, "buffer", type(target).__name__)
    raise fail("err-unsupported-memory", f"{what} expects an HBM tensor, got {kind}")


class Tile:
    """An on-chip tile in SBUF or PSUM: dim 0 is the partition dim (at most 128), the rest is free."""

    __array_priority__ = 1000  # numpy scalars defer to Tile's operators

    def __init__(self, data: Any, dtype: DType, buffer: str = SBUF, allocate: bool = True) -> None:
        data = np.asarray(data)
        if data.ndim >= 1 and data.shape[0] > PMAX:
            raise fail(
                "err-partition-dim",
                f"partition dimension {data.shape[0]} of a {buffer.upper()} tile of shape {tuple(data.shape)} "
                f"exceeds nl.tile_size.pmax ({PMAX})",
            )
        if buffer == PSUM:
            free = math.prod(data.shape[1:]) if data.ndim else 1
            if free > PSUM_FMAX:
                raise fail(
                    "err-psum-free-size",
                    f"PSUM tile of shape {tuple(data.shape)} has free size {free}, over nl.tile_size.psum_fmax "
                    f"({PSUM_FMAX} fp32 elements, one 2 KiB bank per partition)",
                )
        self.data, self.dtype, self.buffer = cast(data, dtype), dtype, buffer
        if allocate:
            current_run().allocate(self)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def __repr__(self) -> str:
        return f"Tile(shape={self.shape}, dtype={self.dtype}, buffer={self.buffer})"

    def __getitem__(self, key: Any) -> Tile:
        access = resolve(self.shape, key)
        check_bounds(self.shape, access, f"{self.buffer.upper()} tile of shape {self.shape}")
        return Tile(gather(self.data, access), self.dtype, self.buffer, allocate=False)

    def __setitem__(self, key: Any, value: Any) -> None:
        access = resolve(self.shape, key)
        check_bounds(self.shape, access, f"{self.buffer.upper()} tile of shape {self.shape}")
        values = operand_values(value)
        try:
            np.broadcast_to(values, access.shape)
        except ValueError:
            raise fail(
                "err-shape-mismatch", f"cannot write a value of shape {np.shape(values)} into an access of shape {access.shape}"
            ) from None
        scatter(self.data, access, cast(values, self.dtype))

    def __iadd__(self, other: Any) -> Tile:
        if self.buffer == PSUM:
            if self.dtype is not float32:
                raise fail("err-psum-accumulate-dtype", f"PSUM accumulation is in fp32; this PSUM tile is {self.dtype}")
            values = operand_values(other)
            if np.shape(values) != self.shape and np.ndim(values) != 0:
                raise fail("err-shape-mismatch", f"cannot accumulate shape {np.shape(values)} into PSUM tile {self.shape}")
            self.data += values.astype(np.float32)
            return self
        from kernelrl.nki.language import add

        self.data = cast(add(self, other).data, self.dtype)
        return self

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


def operand_values(value: Any) -> np.ndarray:
    """The numbers of a compute operand: a tile or a Python scalar (HBM operands are an error)."""
    if isinstance(value, Tile):
        return value.data
    if isinstance(value, HbmTensor | HbmView):
        value._no_compute()
    if isinstance(value, int | float | np.number | bool):
        return np.asarray(value)
    raise fail("err-operand", f"unsupported operand of type {type(value).__name__}; expected a tile or a scalar")
