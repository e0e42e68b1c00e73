"""Warming a worker: one-time initialisation paid once in the supervisor, inherited by every forked
evaluation (backend environments and preloads, the allocator setting, the sampler probe, the Python
dispatcher's first use, the compiler's identity)."""

from __future__ import annotations

import importlib
import os
import sys

from kernelrl.evaluate.backends import BACKENDS, get_backend
from kernelrl.evaluate.confine import make_subreaper

_PRELOADED: set[str] = set()


def preload_for(backend: str) -> None:
    """Import a backend's heavy modules once here, so forked children start warm."""
    if backend in _PRELOADED:
        return
    spec = get_backend(backend)
    os.environ.update(spec.env)
    for module in spec.preload:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    if backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1":
        try:  # the interpreter's one-time setup, here instead of in each candidate process and replay child
            from kernelrl.evaluate.backends.triton_replay import warm_interpreter

            warm_interpreter()
        except Exception:
            pass
    _PRELOADED.add(backend)


def _backend_environment() -> None:
    """Set every backend's environment (TRITON_INTERPRET=1 without a GPU) before anything imports its
    modules. Triton reads the flag when it decorates its own library functions at import (tl.max and
    tl.sum are @triton.jit functions): imported first without it, they are compiled-mode functions that
    an interpreted kernel cannot call ("Cannot call @triton.jit'd outside of the scope of a kernel")."""
    for name in BACKENDS.names():
        os.environ.update(get_backend(name).env)
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") == "1":
        print("kernelrl: triton was imported before TRITON_INTERPRET=1 was set; its reductions will fail "
              "under the interpreter", file=sys.stderr)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def keep_freed_memory(largest_block: int = 32 * 2**20) -> bool:
    """Make glibc keep freed blocks (up to `largest_block` bytes each) for reuse instead of returning them
    to the OS.

    Otherwise each forked evaluation's heap layout decides whether a tensor freed by one call is
    handed back (and the next call's output page-faults in afresh) or reused, which changes timings
    by tens of percent between evaluations of the same code. Kept memory makes every call after the
    warm-up reuse blocks, as PyTorch's CUDA caching allocator does on a GPU. Children inherit the
    setting through fork. Returns False where the C library has no `mallopt` (not glibc).
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, largest_block)) and bool(mallopt(M_TRIM_THRESHOLD, max(2**30, 2 * largest_block)))


def warm() -> None:
    """Pay one-time initialisation here, once, instead of in every forked evaluation."""
    _backend_environment()  # first: the warm-up below imports triton (torch's dispatcher does)
    import torch

    make_subreaper()  # processes an evaluation leaves behind re-parent here, where kill_descendants finds them
    from kernelrl.evaluate.perf_sampler import sampling_method

    sampling_method()  # probed once here (a child process, ~0.1 s); forked judges inherit the answer
    keep_freed_memory()

    from kernelrl.evaluate.guards import OpCounter
    from kernelrl.evaluate.kernel_calls import install_extension_counter

    install_extension_counter()  # imports torch.utils.cpp_extension (~0.1 s) once, here
    with OpCounter():  # the Python dispatcher's first use costs seconds; tensors are tiny (no thread pool)
        torch.empty(4).add_(1).relu_()

    from kernelrl.native.build import compiler_for, compiler_identity
    from kernelrl.native.diagnostics import toolchain_include_dirs

    try:  # paid here once, not inside a candidate's build stage
        compiler_identity(compiler_for("c++"))
        toolchain_include_dirs(compiler_for("c++"), "c++")
    except Exception:
        pass
    preload_for("cpu")
    _warm_static_checks()


_SAMPLE_CANDIDATE = '''
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp("""
#include <cmath>
void f(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = std::fabs(x[i]); }
""", ["f"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        lib.f(x, y, x.numel())
        return y
'''


def _warm_static_checks() -> None:
    """Run the static checks once here: the patterns they compile (Python's `re` cache) are then inherited
    by every forked evaluation instead of compiled in each (~10 ms)."""
    import ast

    from kernelrl.evaluate.static import run_static_checks

    for backend in ("cpu", "cuda"):
        try:
            run_static_checks(ast.parse(_SAMPLE_CANDIDATE), _SAMPLE_CANDIDATE, get_backend(backend), {})
        except Exception:
            pass


