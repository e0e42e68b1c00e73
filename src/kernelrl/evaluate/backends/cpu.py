"""`cpu`: kernels in C/C++ (OpenMP and SIMD allowed) built by the system compiler through kernelrl.native."""

from __future__ import annotations

import ast

from kernelrl.evaluate.backends.base import BACKENDS, Backend, calls_named


@BACKENDS.register("cpu")
class CpuBackend(Backend):
    name = "cpu"
    preload = ("kernelrl.native",)

    def defines_kernel(self, tree: ast.Module) -> bool:
        return calls_named(tree, {"load_cpp", "load_inline", "load"})

    def kernel_hint(self) -> str:
        return (
            "build a C/C++ kernel with `from kernelrl.native import load_cpp; "
            "lib = load_cpp(SOURCE, functions=[...])` and call it in forward"
        )
