"""`cuda`: CUDA C++ kernels, through kernelrl.native.load_cuda or torch's load_inline.

Without a GPU, nvcc still compiles the source (real compiler errors with line numbers), and the
result says the kernel was not run (status `compiled`); `load_inline` candidates are compiled the same
way (`evaluate.inline_cuda`).
"""

from __future__ import annotations

import ast

import torch

from kernelrl.evaluate.backends.base import BACKENDS, Backend, calls_named


@BACKENDS.register("cuda")
class CudaBackend(Backend):
    name = "cuda"
    preload = ("kernelrl.native",)

    def has_device(self) -> bool:
        return torch.cuda.is_available()

    def device(self, index: int | None = None) -> torch.device:
        return torch.device("cuda", index or 0) if self.has_device() else torch.device("cpu")

    def timing_method(self, threads: int) -> str:
        return "wall clock around device-synchronised requests"

    def defines_kernel(self, tree: ast.Module) -> bool:
        return calls_named(tree, {"load_cuda", "load_inline", "load"})

    def kernel_hint(self) -> str:
        return (
            "write CUDA kernels plus a host launcher and build them with "
            "`from kernelrl.native import load_cuda; lib = load_cuda(SOURCE, functions=[...])`"
        )

    def notes(self) -> list[str]:
        return [] if self.has_device() else ["no GPU: compiled with nvcc, not run"]
