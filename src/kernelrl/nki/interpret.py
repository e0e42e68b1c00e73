"""Running NKI kernels: `@nki.jit`, the `neuronxcc` import shim, and the per-run cost report.

Import shim: `nki_modules()` is a context manager that installs this interpreter into `sys.modules`
under `neuronxcc`, `neuronxcc.nki`, `neuronxcc.nki.language` and `neuronxcc.nki.isa` only while it is
active (and only when the real Neuron SDK is not importable, unless `force=True`); the previous
entries are restored on exit. Candidate code is imported inside it (`load_candidate`); kernels keep
working after it exits because they hold references to the interpreter's functions.
"""

from __future__ import annotations

import importlib.util
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

from kernelrl.nki import isa, language
from kernelrl.nki.cost import CostReport
from kernelrl.nki.rules import NkiCompileError
from kernelrl.nki.tensors import _RUN, HbmTensor, KernelRun, bfloat16, to_dtype

SHIM_NAMES = ("neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa")


@dataclass
class KernelResult:
    """Outputs of one interpreted kernel call and its estimated cost."""

    outputs: Any
    cost: CostReport
    sbuf_peak_bytes: int
    psum_peak_banks: int


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


def report_kernel_run(cost: CostReport, outputs: Any) -> None:
    """Tell the active collectors that a kernel ran: its cost, and the tensors it returned."""
    for report in _COLLECTORS.get():
        report.merge(cost)
    made = [t for t in (outputs if isinstance(outputs, tuple | list) else (outputs,)) if isinstance(t, torch.Tensor)]
    for collected in _OUTPUT_COLLECTORS.get():
        collected.extend(made)


def _to_hbm(value: Any, torch_io: list[bool]) -> Any:
    if isinstance(value, torch.Tensor):
        torch_io.append(True)
        dtype = to_dtype(value.dtype)
        data = value.detach().cpu().to(torch.float32 if dtype is bfloat16 else value.dtype).numpy()
        return HbmTensor(np.array(data, dtype=dtype.storage), dtype)
    if isinstance(value, np.ndarray):
        dtype = to_dtype(value.dtype)
        return HbmTensor(np.array(value, dtype=dtype.storage), dtype)
    return value


def _from_hbm(value: Any, as_torch: bool) -> Any:
    if not as_torch:
        return value.data.copy()
    tensor = torch.from_numpy(value.data.copy())
    return tensor.to(torch.bfloat16) if value.dtype is bfloat16 else tensor


def run_kernel(kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> KernelResult:
    """Interpret `kernel` (a function or a `JitKernel`) on numpy/torch inputs copied into HBM tensors."""
    fn = kernel.fn if isinstance(kernel, JitKernel) else kernel
    torch_io: list[bool] = []
    hbm_args = [_to_hbm(a, torch_io) for a in args]
    hbm_kwargs = {k: _to_hbm(v, torch_io) for k, v in kwargs.items()}
    run = KernelRun()
    token = _RUN.set(run)
    try:
        returned = fn(*hbm_args, **hbm_kwargs)
    finally:
        _RUN.reset(token)
    items = returned if isinstance(returned, tuple | list) else (returned,)
    if not items or not all(isinstance(t, HbmTensor) for t in items):
        raise NkiCompileError(
            "err-kernel-return",
            "a kernel must return the HBM tensor(s) it created with nl.ndarray(..., buffer=nl.shared_hbm), "
            f"got {type(returned).__name__}",
            fn.__code__.co_firstlineno,
            fn.__code__.co_filename,
        )
    outputs = tuple(_from_hbm(t, bool(torch_io)) for t in items)
    run.cost.kernels = 1
    report_kernel_run(run.cost, outputs)
    return KernelResult(
        outputs if isinstance(returned, tuple | list) else outputs[0], run.cost, run.sbuf_peak, run.psum_banks_peak
    )


class JitKernel:
    """An `@nki.jit` kernel: calling it interprets the function; `last_result` keeps the last run."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.fn, self.options = fn, options
        self.last_result: KernelResult | None = None
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.last_result = run_kernel(self.fn, *args, **kwargs)
        return self.last_result.outputs

    def __getitem__(self, grid: Any) -> Any:
        raise NkiCompileError(
            "err-unsupported", "SPMD launch grids (kernel[grid](...)) are outside the interpreted NKI subset",
            self.fn.__code__.co_firstlineno, self.fn.__code__.co_filename,
        )


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """`@nki.jit` or `@nki.jit(**options)` (options are recorded, not interpreted)."""
    if fn is None:
        return lambda f: JitKernel(f, options)
    return JitKernel(fn, options)


def _modules() -> dict[str, ModuleType]:
    root = ModuleType("neuronxcc", "kernelrl NKI interpreter shim for the Neuron SDK package")
    nki = ModuleType("neuronxcc.nki", "kernelrl NKI interpreter: nki.jit, nki.language, nki.isa")
    root.__path__, nki.__path__ = [], []  # type: ignore[attr-defined]
    nki.jit, nki.language, nki.isa = jit, language, isa  # type: ignore[attr-defined]
    root.nki = nki  # type: ignore[attr-defined]
    return {"neuronxcc": root, "neuronxcc.nki": nki, "neuronxcc.nki.language": language, "neuronxcc.nki.isa": isa}


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
