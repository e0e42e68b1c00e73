"""The instruction trace of a kernel run, and the trusted replay that turns it into outputs and a cost.

Every public NKI call made by candidate code (nl.*, nisa.*, tile/tensor indexing and operators) goes
through `traced`: the outermost call is recorded as `[op, name, args, kwargs, result]` with every tile,
tensor, view, index expression or mask named by a handle, so the trace holds no value the candidate
computed on the host except Python scalars. A trace is plain JSON.

`replay` re-executes a trace from scratch on arrays the *judge* supplies, with the judge's own copy of
this package and of the cost model: only registered op names can be called, handles resolve only to
objects the replay made, and sizes and op counts are bounded. The outputs of the replay and its cost are
what the judge may trust; see `kernelrl.nki.verify` for checking a forward against them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import weakref
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from kernelrl.nki.rules import NkiCompileError, fail
from kernelrl.nki.tensors import (
    _RUN,
    DType,
    HbmTensor,
    HbmView,
    IndexExpr,
    KernelRun,
    Mask,
    Tile,
    to_dtype,
)

OPS: dict[str, Callable[..., Any]] = {}  # name -> traced wrapper (what candidate code calls)
RAW: dict[str, Callable[..., Any]] = {}  # name -> implementation (what the replay calls)
_NAMES: dict[int, str] = {}  # id(wrapper) -> name, to encode ops passed as arguments (op=nl.exp)
MAX_OPS = 1_000_000
MAX_LITERAL_ELEMENTS = 1 << 22
_HANDLED = (Tile, HbmTensor, HbmView, IndexExpr, Mask)


class ParDim(int):
    """`nl.par_dim(n)`: an int that marks the partition dimension of a shape."""


def traced(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn` as the NKI op `name`; calls from candidate code are recorded in the run's trace."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        RAW[name] = fn

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            run = _RUN.get()
            if run is None or run.trace is None or run.depth:
                return fn(*args, **kwargs)
            encoded = [encode(args, run), encode(kwargs, run)]
            run.depth += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                run.depth -= 1
            if len(run.trace) >= MAX_OPS:
                raise fail("err-kernel-too-long", f"the kernel issued more than {MAX_OPS} instructions")
            run.trace.append(["op", name, *encoded, register(result, run)])
            return result

        OPS[name] = wrapper
        _NAMES[id(wrapper)] = name
        return wrapper

    return deco


for _name, _fn in (("Mask.__and__", "_mask_and"), ("Mask.__or__", "_mask_or"), ("Mask.__invert__", "_mask_invert"),
                   ("IndexExpr.__getitem__", "_index_getitem"), ("HbmTensor.__getitem__", "_hbm_getitem"),
                   ("HbmTensor.reshape", "_hbm_reshape"), ("Tile.__getitem__", "_tile_getitem"),
                   ("Tile.__setitem__", "_tile_setitem"), ("Tile.__iadd__", "_tile_iadd"),
                   ("Tile.broadcast_to", "_tile_broadcast_to")):
    from kernelrl.nki import tensors as _tensors

    traced(_name)(getattr(_tensors, _fn))
for _op in ("add", "sub", "rsub", "mul", "floordiv", "mod", "lt", "le", "gt", "ge", "eq", "ne"):
    traced("IndexExpr." + _op)(functools.partial(lambda e, o, op: _tensors.index_arith(e, o, op), op=_op))


# ---------------------------------------------------------------- encoding


def _array_literal(values: np.ndarray, kind: str) -> dict[str, Any]:
    if values.size > MAX_LITERAL_ELEMENTS:
        raise fail("err-index-size", f"an index expression of {values.size} elements is too large")
    data = base64.b64encode(zlib.compress(np.ascontiguousarray(values).tobytes())).decode()
    return {kind: data, "shape": list(values.shape)}


def encode(value: Any, run: KernelRun) -> Any:
    """A JSON-able description of an op argument; device objects become handles."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, ParDim):
        return {"pd": int(value)}
    if isinstance(value, int | float):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, _HANDLED):
        if value._h in run.known:
            return {"h": value._h}
        if isinstance(value, IndexExpr):
            return _array_literal(value._v, "ix")
        if isinstance(value, Mask):
            return _array_literal(value._v.astype(np.int64), "mk")
        raise fail("err-foreign-value", f"a {type(value).__name__} that this kernel run did not make")
    if isinstance(value, tuple):
        return {"t": [encode(v, run) for v in value]}
    if isinstance(value, list):
        return {"l": [encode(v, run) for v in value]}
    if isinstance(value, dict):
        return {"d": {str(k): encode(v, run) for k, v in value.items()}}
    if isinstance(value, slice):
        return {"s": [encode(value.start, run), encode(value.stop, run), encode(value.step, run)]}
    if value is Ellipsis:
        return {"e": 0}
    if isinstance(value, DType) or getattr(value, "nki_dtype", None):
        return {"dt": to_dtype(value).name}
    if getattr(value, "nki_op", None):
        return {"np": value.nki_op}
    if id(value) in _NAMES:
        return {"fn": _NAMES[id(value)]}
    raise fail("err-unsupported-operand", f"an NKI call got an argument of type {type(value).__name__}; kernels "
               "pass tiles, tensors, index expressions, masks, dtypes, ops and Python numbers")


def _freed(run: KernelRun, handle: int) -> None:
    if run.trace is not None:
        run.trace.append(["free", handle])


def register(result: Any, run: KernelRun) -> Any:
    """Make the device objects in an op's result nameable by later ops; the result's handle structure."""
    if isinstance(result, _HANDLED):
        if result._h not in run.known:
            run.known.add(result._h)
            weakref.finalize(result, _freed, run, result._h)
        return {"h": result._h}
    if isinstance(result, tuple | list):
        return {"t": [register(r, run) for r in result]}
    return None


# ---------------------------------------------------------------- replay


class ReplayError(Exception):
    """A trace the judge cannot replay: malformed, over a bound, or breaking an NKI rule on replay."""


def _literal(spec: dict[str, Any], key: str) -> np.ndarray:
    shape = [int(s) for s in spec["shape"]]
    if int(np.prod(shape, dtype=np.int64)) > MAX_LITERAL_ELEMENTS:
        raise ReplayError("index literal too large")
    raw = zlib.decompressobj().decompress(base64.b64decode(spec[key]), MAX_LITERAL_ELEMENTS * 8 + 1)
    return np.frombuffer(raw, dtype=np.int64).reshape(shape).copy()


def decode(value: Any, table: dict[int, Any]) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        raise ReplayError("bare list in a trace")
    if not isinstance(value, dict) or len(value) not in (1, 2):
        raise ReplayError(f"malformed trace value {str(value)[:80]}")
    from kernelrl.nki import npfacade

    key = next(iter(value))
    body = value[key]
    if key == "h":
        if body not in table:
            raise ReplayError(f"handle {body} names nothing the replay made")
        return table[body]
    if key == "pd":
        return ParDim(int(body))
    if key == "ix":
        return IndexExpr(_literal(value, "ix"))
    if key == "mk":
        return Mask(_literal(value, "mk").astype(bool))
    if key == "t":
        return tuple(decode(v, table) for v in body)
    if key == "l":
        return [decode(v, table) for v in body]
    if key == "d":
        return {str(k): decode(v, table) for k, v in body.items()}
    if key == "s":
        return slice(*(decode(v, table) for v in body))
    if key == "e":
        return Ellipsis
    if key == "dt":
        return to_dtype(str(body))
    if key == "np":
        return npfacade.op(str(body))
    if key == "fn" and body in OPS:
        return OPS[body]
    raise ReplayError(f"unknown trace value {key!r}")


def bind(recorded: Any, result: Any, table: dict[int, Any]) -> None:
    if recorded is None:
        return
    if "h" in recorded:
        table[int(recorded["h"])] = result
        return
    parts = recorded["t"]
    if not isinstance(result, tuple | list) or len(result) != len(parts):
        raise ReplayError("an op's result does not have the recorded structure")
    for r, v in zip(parts, result, strict=True):
        bind(r, v, table)


def digest(array: np.ndarray) -> str:
    """Content identity of an HBM array (bytes and storage dtype; reshapes keep it)."""
    array = np.ascontiguousarray(array)
    return hashlib.sha256(str(array.dtype).encode() + b":" + array.tobytes()).hexdigest()


def replay(trace: dict[str, Any], arrays: list[np.ndarray]) -> tuple[list[np.ndarray], KernelRun]:
    """Run `trace` on `arrays` (one per tensor argument, in order): the outputs and the replay's run state
    (its `cost` is the trusted estimate). Raises ReplayError for a trace that does not replay."""
    try:
        return _replay(trace, arrays)
    except ReplayError:
        raise
    except NkiCompileError as exc:
        raise ReplayError(f"the trace breaks an NKI rule on replay: {exc.message}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, MemoryError) as exc:
        raise ReplayError(f"malformed trace: {type(exc).__name__}: {str(exc)[:200]}") from None


def _replay(trace: dict[str, Any], arrays: list[np.ndarray]) -> tuple[list[np.ndarray], KernelRun]:
    ops = trace["ops"]
    if not isinstance(ops, list) or len(ops) > 2 * MAX_OPS:
        raise ReplayError("trace has no op list or too many ops")
    run = KernelRun(trace=None, grid=tuple(int(g) for g in trace.get("grid") or ()))
    table: dict[int, Any] = {}
    tensors = [a for a in trace["args"] if isinstance(a, dict) and "tensor" in a]
    if len(tensors) != len(arrays):
        raise ReplayError(f"the trace takes {len(tensors)} tensors, {len(arrays)} were given")
    token = _RUN.set(run)
    try:
        for spec, array in zip(tensors, arrays, strict=True):
            dtype = to_dtype(str(spec["dtype"]))
            shape = tuple(int(s) for s in spec["shape"])
            data = np.array(array, dtype=dtype.storage).reshape(shape)
            table[int(spec["tensor"])] = HbmTensor(data, dtype)
        for entry in ops:
            if entry[0] == "free":
                table.pop(entry[1], None)
                continue
            _, name, args, kwargs, recorded = entry
            if name not in RAW:
                raise ReplayError(f"unknown op {name!r}")
            result = RAW[name](*decode(args, table), **decode(kwargs, table))
            bind(recorded, result, table)
        returned = decode(trace["returns"], table)
    finally:
        _RUN.reset(token)
    items = returned if isinstance(returned, tuple | list) else (returned,)
    if not items or not all(isinstance(t, HbmTensor) for t in items):
        raise ReplayError("the trace returns something other than HBM tensors")
    return [t._data.copy() for t in items], run
