"""Anti-hacking helpers: counters the candidate process reports as feedback, and the judge's own checks.

- `OpCounter`: torch compute ops issued by the candidate's forward (allocation, views and copies
  are free; everything else counts), through a dispatch mode the candidate cannot see or disable
  (the static checks forbid dispatch modes, frames and monkeypatching).
- `LaunchCounter`: Triton kernel launches, by wrapping the launcher of jitted/interpreted kernels.
- `declared_cuda_kernels` / `profiled_cuda_kernels` / `launched_own_kernel`: on a GPU, the names of
  the `__global__` functions the candidate defines must show up among the kernels the profiler saw.
- the input-mutation check (the judge compares the inputs it shared with its private copies).
- `device_ceilings` / `roofline_ms`: the fastest a forward could possibly be on this machine.
"""

from __future__ import annotations

import functools
import re
import time
from collections import Counter
from typing import Any, ClassVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that allocate, view, copy or query: allowed in a candidate's forward.
FREE_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_", "view", "_unsafe_view",
    "reshape", "_reshape_alias", "as_strided", "expand", "permute", "transpose", "t", "squeeze", "unsqueeze",
    "flatten", "unflatten", "select", "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind",
    "contiguous", "clone", "copy_", "detach", "alias", "lift_fresh", "lift_fresh_copy", "_to_copy", "to",
    "_local_scalar_dense", "item", "resize_", "set_", "view_as", "expand_as", "movedim", "swapaxes",
    "arange", "is_same_size", "_has_compatible_shallow_copy_type", "size", "stride", "numel", "dim",
    "is_nonzero", "equal", "_reshape_copy", "unfold", "view_as_real", "view_as_complex", "resolve_conj", "resolve_neg",
}

_INSIDE_KERNEL = [0]  # >0 while a Triton launch runs (the interpreter issues torch ops of its own)


class OpCounter(TorchDispatchMode):
    """Counts torch compute ops (by aten name) issued while active."""

    def __init__(self) -> None:
        super().__init__()
        self.compute: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name not in FREE_OPS and not _INSIDE_KERNEL[0]:
            self.compute[name] += 1
        return func(*args, **(kwargs or {}))


def triton_launch_classes() -> list[type]:
    """Triton's classes whose `run` launches a kernel (compiled and interpreted); [] without Triton."""
    try:
        import triton.runtime.jit as jit
    except ImportError:
        return []
    classes: list[type] = [jit.JITFunction]
    try:
        import triton.runtime.interpreter as interpreter

        classes.append(interpreter.InterpretedFunction)
    except ImportError:
        pass
    return classes


class LaunchCounter:
    """Counts Triton kernel launches (real or interpreted) by wrapping their `run` method."""

    launches: ClassVar[Counter[str]] = Counter()
    _installed: ClassVar[bool] = False

    @classmethod
    def install(cls) -> None:
        if cls._installed:
            return
        for klass in triton_launch_classes():
            original = klass.run

            @functools.wraps(original)
            def run(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
                if not kwargs.get("warmup"):
                    name = getattr(getattr(self, "fn", None), "__name__", "kernel")
                    cls.launches[name] += 1
                _INSIDE_KERNEL[0] += 1
                try:
                    return __original(self, *args, **kwargs)
                finally:
                    _INSIDE_KERNEL[0] -= 1

            klass.run = run
        cls._installed = True


_GLOBAL_KERNEL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+)*void\s+(\w+)")


def declared_cuda_kernels(source: str) -> set[str]:
    """Names of the `__global__` functions defined anywhere in a candidate's source text."""
    return set(_GLOBAL_KERNEL.findall(source))


def profiled_cuda_kernels(fn: Any) -> list[str]:
    """Names of the GPU kernels that ran during `fn()`, from torch's profiler (CUPTI)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [event.name for event in prof.events() if event.device_type == DeviceType.CUDA]


def launched_own_kernel(declared: set[str], launched: list[str]) -> bool:
    """Whether any launched kernel is one of `declared` (profiler names are demangled signatures such
    as `void scale_kernel<float>(float*, int)`, so a name matches as a whole identifier)."""
    return any(re.search(rf"(?<![\w:]){re.escape(name)}\b", kernel) for name in declared for kernel in launched)


def tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor leaf of a nested output."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, list | tuple):
        return [t for o in obj for t in tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors(o)]
    return []


def mutated(before: list[Any], after: list[Any]) -> bool:
    """Whether any input tensor changed during the candidate's forward: a bitwise comparison (NaN payloads
    and signed zeros included, as a write would change them), read as 64-bit words where the layout allows."""
    for b, a in zip(before, after, strict=True):
        if isinstance(b, torch.Tensor) and not _same_bits(b, a):
            return True
    return False


@functools.cache
def _libc_memcmp() -> Any:
    import ctypes

    memcmp = ctypes.CDLL(None).memcmp
    memcmp.restype, memcmp.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return memcmp


def _memcmp(a: int, b: int, nbytes: int) -> int:
    """libc memcmp: a bitwise comparison at memory speed (torch.equal is ~10x slower on a CPU)."""
    return int(_libc_memcmp()(a, b, nbytes))


def _same_bits(b: torch.Tensor, a: torch.Tensor) -> bool:
    if b.shape != a.shape or b.dtype != a.dtype:
        return False
    if not (b.is_contiguous() and a.is_contiguous()) or b.dtype.is_complex or b.numel() == 0:
        return torch.equal(b, a) or torch.equal(b.nan_to_num(), a.nan_to_num())
    if b.device.type == "cpu" and a.device.type == "cpu":
        return _memcmp(b.data_ptr(), a.data_ptr(), b.numel() * b.element_size()) == 0
    b_bytes, a_bytes = b.reshape(-1).view(torch.uint8), a.reshape(-1).view(torch.uint8)
    if b_bytes.numel() % 8 == 0:
        return torch.equal(b_bytes.view(torch.int64), a_bytes.view(torch.int64))
    return torch.equal(b_bytes, a_bytes)


def spawned_processes() -> int:
    """Child processes of this (the evaluated) process; a kernel never starts any."""
    import os

    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as handle:
                total += len(handle.read().split())
        except OSError:
            pass
    return total


@functools.lru_cache(maxsize=16)
def device_ceilings(device_type: str, nbytes: int, threads: int) -> tuple[float, float]:
    """Measured (bytes/s for a copy of `nbytes`, flop/s of a float32 matmul) on this device."""
    device = torch.device(device_type)
    n = max(nbytes // 4, 1 << 16)
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    a = torch.rand(512, 512, device=device)

    def best(fn: Any, reps: int = 5) -> float:
        fn()
        times = []
        for _ in range(reps):
            if device_type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if device_type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return min(times)

    bandwidth = 2 * n * 4 / best(lambda: dst.copy_(src))
    flops = 2 * 512**3 / best(lambda: a @ a)
    return bandwidth, flops


def count_flops(model: torch.nn.Module, inputs: list[Any]) -> int:
    """FLOPs of one reference forward (matmuls and convolutions), by torch's flop counter."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(*inputs)
    return int(counter.get_total_flops())


def io_bytes(inputs: list[Any], outputs: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(inputs) + tensors(outputs))


def roofline_ms(nbytes: int, flops: int, bandwidth: float, flop_rate: float) -> float:
    """Lower bound on one forward: reading inputs and writing outputs once, and doing its matmul FLOPs."""
    return 1e3 * max(nbytes / bandwidth, flops / flop_rate)
