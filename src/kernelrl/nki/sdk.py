"""The Neuron SDK's own CPU simulator, where `neuronxcc` is installed (written against its documented API;
the SDK is not installable here, so this path is tested with a stand-in package).

With the SDK importable, the candidate's `import neuronxcc.nki` gets the SDK, not this project's
interpreter (`nki_modules` steps aside), and its `@nki.jit` kernels are SDK objects. `simulate_sdk_kernels`
wraps each such kernel in the candidate module so that a call runs it in the SDK's simulator:
`nki.simulate(kernel)(*arrays)` (SDK 2.30 and later) or `nki.simulate_kernel(kernel, *arrays)` (earlier),
with torch tensors passed as NumPy arrays and NumPy results returned as torch tensors. Every call is
reported to the interpreter's collectors (a kernel ran; the outputs it made), so the gym's
`[kernel-not-called]` and `[host-compute]` feedback works as with the interpreter; the SDK's simulator
gives no cost estimate (`CostReport.sdk_simulated` counts its runs).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np
import torch

from kernelrl.nki.cost import CostReport
from kernelrl.nki.interpret import report_kernel_run


def is_sdk_kernel(value: Any) -> bool:
    """An object made by the SDK's `nki.jit` (its type is defined in a `neuronxcc` module)."""
    return callable(value) and not isinstance(value, type) and type(value).__module__.split(".")[0] == "neuronxcc"


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype == torch.bfloat16 else value).contiguous().numpy()
    return value


def _to_torch(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, tuple | list):
        return type(value)(_to_torch(v) for v in value)
    return value


class SimulatedKernel:
    """A call runs the SDK kernel in the SDK's CPU simulator."""

    def __init__(self, kernel: Any, nki: ModuleType) -> None:
        self.kernel, self.nki = kernel, nki
        self.__name__ = getattr(kernel, "__name__", "kernel")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arrays = [_to_numpy(a) for a in args]
        named = {k: _to_numpy(v) for k, v in kwargs.items()}
        if hasattr(self.nki, "simulate"):
            result = self.nki.simulate(self.kernel)(*arrays, **named)
        else:
            result = self.nki.simulate_kernel(self.kernel, *arrays, **named)
        outputs = _to_torch(result) if any(isinstance(a, torch.Tensor) for a in args) else result
        report_kernel_run(CostReport(kernels=1, sdk_simulated=1), outputs)
        return outputs


def simulate_sdk_kernels(module: ModuleType) -> int:
    """Replace each SDK kernel among `module`'s globals with a `SimulatedKernel`; how many were wrapped."""
    nki = importlib.import_module("neuronxcc.nki")
    wrapped = 0
    for name, value in list(vars(module).items()):
        if is_sdk_kernel(value):
            setattr(module, name, SimulatedKernel(value, nki))
            wrapped += 1
    return wrapped
