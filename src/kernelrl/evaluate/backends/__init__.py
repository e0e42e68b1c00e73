"""Evaluation backends: `cpu` (C/C++ through kernelrl.native), `triton`, `cuda`. One registry by name."""

from kernelrl.evaluate.backends import cpu, cuda, triton  # noqa: F401  (registers the backends)
from kernelrl.evaluate.backends.base import BACKENDS, Backend, get_backend

__all__ = ["BACKENDS", "Backend", "get_backend"]
