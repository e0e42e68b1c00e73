"""Running NKI kernels: `@nki.jit`, the `neuronxcc` import shim, and the per-run cost report.

Import shim: `nki_modules()` is a context manager that installs this interpreter into `sys.modules`
under `neuronxcc`, `neuronxcc.nki`, `neuronxcc.nki.language`, `neuronxcc.nki.isa` and `neuronxcc.nki.typing`,
and the standalone package's `nki`, `nki.language`, `nki.isa` (destination-passing) and `nki.typing`
(modules of public API names only), and the numpy facade under `numpy`, only while it is active (and only when the real Neuron SDK is not importable, unless `force=True`); the previous
entries are restored on exit. Candidate code is imported inside it (`load_candidate`); kernels keep
working after it exits because they hold references to the interpreter's functions.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch

from kernelrl.nki import dstisa, isa, language, npfacade
from kernelrl.nki.cost import CostReport
from kernelrl.nki.language import begin_program
from kernelrl.nki.rules import NkiCompileError
from kernelrl.nki.tensors import _RUN, HbmTensor, KernelRun, bfloat16, to_dtype
from kernelrl.nki.trace import digest, encode, register

SHIM_NAMES = ("neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa", "neuronxcc.nki.typing",
              "nki", "nki.language", "nki.isa", "nki.typing", "numpy")


@dataclass
class KernelResult:
    """Outputs of one interpreted kernel call and its estimated cost."""

    outputs: Any
    cost: CostReport
    sbuf_peak_bytes: int
    psum_peak_banks: int
    trace: dict[str, Any] | None = None


_COLLECTORS: ContextVar[tuple[CostReport, ...]] = ContextVar("nki_cost_collectors", default=())


@contextmanager
def collect_costs() -> Iterator[CostReport]:
    """Sum the cost reports of every kernel run inside the block (e.g. one `ModelNew.forward`)."""
    report = CostReport()
    token = _COLLECTORS.set((*_COLLECTORS.get(), report))
    try:
        yield report
    finally:
        _COLLECTORS.reset(token)


_OUTPUT_COLLECTORS: ContextVar[tuple[list[Any], ...]] = ContextVar("nki_output_collectors", default=())


@contextmanager
def collect_outputs() -> Iterator[list[Any]]:
    """The host arrays/tensors every kernel run inside the block returned (to tell a kernel's output from
    one computed on the host)."""
    made: list[Any] = []
    token = _OUTPUT_COLLECTORS.set((*_OUTPUT_COLLECTORS.get(), made))
    try:
        yield made
    finally:
        _OUTPUT_COLLECTORS.reset(token)


_TRACE_COLLECTORS: ContextVar[tuple[list[dict[str, Any]], ...]] = ContextVar("nki_trace_collectors", default=())


@contextmanager
def collect_traces() -> Iterator[list[dict[str, Any]]]:
    """The instruction trace (JSON) of every kernel run inside the block, in call order: what the judge
    replays (`kernelrl.nki.verify.verify_forward`) to get outputs and a cost it can trust."""
    made: list[dict[str, Any]] = []
    token = _TRACE_COLLECTORS.set((*_TRACE_COLLECTORS.get(), made))
    try:
        yield made
    finally:
        _TRACE_COLLECTORS.reset(token)


def report_kernel_run(cost: CostReport, outputs: Any, trace: dict[str, Any] | None = None) -> None:
    """Tell the active collectors that a kernel ran: its cost, the tensors it returned, its trace."""
    for report in _COLLECTORS.get():
        report.merge(cost)
    made = [t for t in (outputs if isinstance(outputs, tuple | list) else (outputs,)) if isinstance(t, torch.Tensor)]
    for collected in _OUTPUT_COLLECTORS.get():
        collected.extend(made)
    if trace is not None:
        for traces in _TRACE_COLLECTORS.get():
            traces.append(trace)


def hbm_array(value: Any) -> tuple[np.ndarray, Any]:
    """A torch tensor or numpy array as the HBM storage array the interpreter (and its replay) uses."""
    if isinstance(value, torch.Tensor):
        dtype = to_dtype(value.dtype)
        data = value.detach().cpu().to(torch.float32 if dtype is bfloat16 else value.dtype).contiguous().numpy()
        return np.array(data, dtype=dtype.storage), dtype
    dtype = to_dtype(value.dtype)
    return np.array(value, dtype=dtype.storage), dtype


def _to_hbm(value: Any, torch_io: list[bool], run: KernelRun, specs: list[Any]) -> Any:
    if isinstance(value, torch.Tensor | np.ndarray):
        torch_io.append(isinstance(value, torch.Tensor))
        data, dtype = hbm_array(value)
        tensor = HbmTensor(data, dtype)
        specs.append({"tensor": register(tensor, run)["h"], "shape": list(data.shape), "dtype": dtype.name,
                      "digest": digest(data)})
        return tensor
    specs.append(encode(value, run))
    return value


def _from_hbm(value: Any, as_torch: bool) -> Any:
    if not as_torch:
        return value._data.copy()
    tensor = torch.from_numpy(value._data.copy())
    return tensor.to(torch.bfloat16) if value.dtype is bfloat16 else tensor


def run_kernel(kernel: Callable[..., Any], *args: Any, grid: tuple[int, ...] = (), **kwargs: Any) -> KernelResult:
    """Interpret `kernel` (a function or a `JitKernel`) on numpy/torch inputs copied into HBM tensors, once
    per program of the SPMD launch `grid` (empty: one program)."""
    fn = kernel.fn if isinstance(kernel, JitKernel) else kernel
    torch_io: list[bool] = []
    run = KernelRun(trace=[], grid=tuple(grid))
    token = _RUN.set(run)
    try:
        specs: list[Any] = []
        hbm_args = [_to_hbm(a, torch_io, run, specs) for a in args]
        kw_specs: list[Any] = []
        hbm_kwargs = {k: _to_hbm(v, torch_io, run, kw_specs) for k, v in kwargs.items()}
        returned: Any = None
        for program in itertools.product(*(range(g) for g in grid)):
            begin_program(program)
            returned = fn(*hbm_args, **hbm_kwargs)
        items = returned if isinstance(returned, tuple | list) else (returned,)
        if not items or not all(isinstance(t, HbmTensor) for t in items):
            raise NkiCompileError(
                "err-kernel-return",
                "a kernel must return the HBM tensor(s) it created with nl.ndarray(..., buffer=nl.shared_hbm), "
                f"got {type(returned).__name__}",
                fn.__code__.co_firstlineno,
                fn.__code__.co_filename,
            )
        trace = {"kernel": getattr(fn, "__name__", "kernel"), "grid": list(grid), "args": specs,
                 "kwargs": dict(zip(kwargs, kw_specs, strict=True)), "ops": run.trace,
                 "returns": encode(returned, run)}
    finally:
        _RUN.reset(token)
    outputs = tuple(_from_hbm(t, any(torch_io)) for t in items)
    run.cost.kernels = 1
    report_kernel_run(run.cost, outputs, trace)
    return KernelResult(
        outputs if isinstance(returned, tuple | list) else outputs[0], run.cost, run.sbuf_peak, run.psum_banks_peak,
        trace,
    )


def _grid(grid: Any) -> tuple[int, ...]:
    grid = grid if isinstance(grid, tuple) else (grid,)
    if not grid or not all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in grid):
        raise NkiCompileError("err-launch-grid", f"a launch grid is one or more positive ints, got {grid!r}")
    if len(grid) > 4 or math.prod(grid) > 65536:
        raise NkiCompileError("err-launch-grid", f"launch grid {grid} is too large (at most 4 axes, 65536 programs)")
    return grid


class JitKernel:
    """An `@nki.jit` kernel: calling it interprets the function; `kernel[grid](...)` launches an SPMD grid
    (`nl.program_id(axis)` tells the program apart); `last_result` keeps the last run."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any], grid: tuple[int, ...] = ()) -> None:
        self.fn, self.options, self.grid = fn, options, grid
        self.last_result: KernelResult | None = None
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.last_result = run_kernel(self.fn, *args, grid=self.grid, **kwargs)
        return self.last_result.outputs

    def __getitem__(self, grid: Any) -> JitKernel:
        return JitKernel(self.fn, self.options, _grid(grid))


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """`@nki.jit` or `@nki.jit(**options)` (options are recorded, not interpreted)."""
    if fn is None:
        return lambda f: JitKernel(f, options)
    return JitKernel(fn, options)


def baremetal(kernel: Callable[..., Any] | None = None, **options: Any) -> Any:
    """`@nki.baremetal`: here the same interpreted kernel as `nki.jit` (NumPy arrays in and out)."""
    return jit(kernel, **options) if kernel is not None else jit(**options)


benchmark = profile = baremetal


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """`nki.simulate_kernel(kernel, *arrays)`: run the kernel (a grid launch `kernel[g]` too) on NumPy arrays."""
    return kernel(*args, **kwargs) if isinstance(kernel, JitKernel) else run_kernel(kernel, *args, **kwargs).outputs


def simulate(kernel: Any) -> Callable[..., Any]:
    """`nki.simulate(kernel)(*arrays)` (the newer spelling of simulate_kernel)."""
    return lambda *args, **kwargs: simulate_kernel(kernel, *args, **kwargs)


def _public(name: str, source: ModuleType, names: Any, doc: str) -> ModuleType:
    """A module holding only the public API names of `source`: no numpy, cost model or internals."""
    module = ModuleType(name, doc)
    for attr in names:
        setattr(module, attr, getattr(source, attr))
    return module


def _package(name: str, isa_module: ModuleType) -> dict[str, ModuleType]:
    """The modules of one NKI namespace: `name`, `name.language`, `name.isa` (from `isa_module`), `name.typing`."""
    from kernelrl.nki import nkitypes

    nki = ModuleType(name, "kernelrl NKI interpreter: nki.jit, nki.language, nki.isa")
    nki.__path__ = []  # type: ignore[attr-defined]
    nl = _public(f"{name}.language", language, language.__all__, language.__doc__ or "")
    nisa = _public(f"{name}.isa", isa_module, isa_module.__all__, isa_module.__doc__ or "")
    nt = _public(f"{name}.typing", nkitypes, nkitypes.__all__, nkitypes.__doc__ or "")
    for attr, value in (("jit", jit), ("baremetal", baremetal), ("benchmark", benchmark), ("profile", profile),
                        ("simulate_kernel", simulate_kernel), ("simulate", simulate), ("language", nl), ("isa", nisa),
                        ("typing", nt), ("tensor", nkitypes.tensor)):
        setattr(nki, attr, value)
    return {name: nki, f"{name}.language": nl, f"{name}.isa": nisa, f"{name}.typing": nt}


def _modules() -> dict[str, ModuleType]:
    """`neuronxcc.nki*` (NKI Beta 1: instructions return their result) and the standalone `nki*` package
    (Beta 2 and later: `nki.isa` instructions write into `dst`); both share `nki.language`'s interpreter."""
    root = ModuleType("neuronxcc", "kernelrl NKI interpreter shim for the Neuron SDK package")
    root.__path__ = []  # type: ignore[attr-defined]
    legacy = _package("neuronxcc.nki", isa)
    root.nki = legacy["neuronxcc.nki"]  # type: ignore[attr-defined]
    return {"neuronxcc": root, **legacy, **_package("nki", dstisa)}


def real_sdk_available() -> bool:
    """Whether the real Neuron SDK (`neuronxcc`) is importable, ignoring this shim."""
    module = sys.modules.get("neuronxcc")
    if module is not None:
        return getattr(module, "__file__", None) is not None  # the shim has no file
    try:
        return importlib.util.find_spec("neuronxcc") is not None
    except (ImportError, ValueError):
        return False


_LOCK = threading.RLock()
_DEPTH = [0]
_SAVED: dict[str, ModuleType | None] = {}


@contextmanager
def nki_modules(force: bool = False) -> Iterator[bool]:
    """Install the interpreter as `neuronxcc.nki*` in sys.modules while active; yields whether it did."""
    with _LOCK:
        if _DEPTH[0] == 0 and not force and real_sdk_available():
            installed = False
        else:
            installed = True
            if _DEPTH[0] == 0:
                _SAVED.clear()
                _SAVED.update({name: sys.modules.get(name) for name in SHIM_NAMES})
                sys.modules.update(_modules())
                sys.modules["numpy"] = npfacade.facade()  # candidate source sees dtype and op names only
            _DEPTH[0] += 1
    try:
        yield installed
    finally:
        if installed:
            with _LOCK:
                _DEPTH[0] -= 1
                if _DEPTH[0] == 0:
                    for name, previous in _SAVED.items():
                        if previous is None:
                            sys.modules.pop(name, None)
                        else:
                            sys.modules[name] = previous


def load_candidate(source: str, filename: str = "<nki-candidate>", name: str = "nki_candidate") -> dict[str, Any]:
    """Execute candidate source with the `neuronxcc` names resolving to the interpreter; its namespace."""
    namespace: dict[str, Any] = {"__name__": name, "__file__": filename}
    with nki_modules():
        exec(compile(source, filename, "exec"), namespace)
    return namespace
