"""`nki`: AWS Neuron Kernel Interface kernels (NKI-Agent's target). With the Neuron SDK and a Neuron
device they would run for real; everywhere else under kernelrl's NumPy NKI interpreter (`kernelrl.nki`),
which enforces the hardware's tile rules as compile errors and estimates engine time, never wall time."""

from __future__ import annotations

import ast
import glob
from typing import ClassVar

from kernelrl.evaluate.backends.base import BACKENDS, Backend, imports_module


@BACKENDS.register("nki")
class NkiBackend(Backend):
    name = "nki"
    preload = ("numpy", "kernelrl.nki", "kernelrl.nki.interpret")
    extra_imports = ("neuronxcc",)
    denied_imports: ClassVar[dict[str, str]] = {"numpy": "host-side compute: an NKI kernel loads tiles and computes on them",
                                                 "triton": "another backend"}

    def import_hint(self) -> str:
        return "torch, math, neuronxcc.nki (nki, nki.language, nki.isa)"

    def has_device(self) -> bool:
        """A Neuron device and the real SDK; the interpreter is no device."""
        from kernelrl.nki.interpret import real_sdk_available

        return bool(glob.glob("/dev/neuron*")) and real_sdk_available()

    def timing_method(self, threads: int) -> str:
        return "not timed (NKI interpreter): an estimated engine cost is in the notes"

    def defines_kernel(self, tree: ast.Module) -> bool:
        """Imports neuronxcc.nki and decorates a function with `nki.jit` (or `jit`)."""
        if not imports_module(tree, "neuronxcc"):
            return False
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for deco in node.decorator_list:
                    target = deco.func if isinstance(deco, ast.Call) else deco
                    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                    if name == "jit":
                        return True
        return False

    def kernel_hint(self) -> str:
        return ("define an @nki.jit kernel (import neuronxcc.nki as nki, neuronxcc.nki.language as nl) that loads "
                "tiles with nl.load, computes on them and stores into an nl.shared_hbm output it returns; call it "
                "from ModelNew.forward and return its output")

    def notes(self) -> list[str]:
        if self.has_device():
            return []
        from kernelrl.nki.interpret import real_sdk_available

        if real_sdk_available():
            return ["no Neuron device: kernels ran in the Neuron SDK's CPU simulator; timing is not meaningful"]
        return ["no Neuron device: ran under kernelrl's NumPy NKI interpreter; timing is not meaningful "
                "(an estimated engine cost is reported instead)"]
