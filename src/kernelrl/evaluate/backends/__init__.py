"""Evaluation backends: `cpu` (C/C++ through kernelrl.native), `triton`, `cuda`, `nki`. One registry by name."""

from kernelrl.evaluate.backends import cpu, cuda, nki, triton  # noqa: F401  (registers the backends)
from kernelrl.evaluate.backends.base import BACKENDS, Backend, get_backend

__all__ = ["BACKENDS", "Backend", "get_backend"]
