"""`nki`: AWS Neuron Kernel Interface kernels (NKI-Agent's target). With the Neuron SDK and a Neuron
device they would run for real; everywhere else under kernelrl's NumPy NKI interpreter (`kernelrl.nki`),
which enforces the hardware's tile rules as compile errors and estimates engine time, never wall time."""

from __future__ import annotations

import ast
import glob
from typing import Any, ClassVar

from kernelrl.evaluate.backends.base import BACKENDS, Backend, decorated_jit, imports_module

# Private attributes honest kernel code needs (`super().__init__()` in ModelNew).
ALLOWED_PRIVATE = {"__init__"}


@BACKENDS.register("nki")
class NkiBackend(Backend):
    name = "nki"
    preload = ("numpy", "kernelrl.nki", "kernelrl.nki.interpret")
    extra_imports = ("neuronxcc", "nki")  # Beta 1 (neuronxcc.nki) and the standalone nki package
    denied_imports: ClassVar[dict[str, str]] = {"triton": "another backend"}

    def __init__(self) -> None:
        _register_static_check()

    def import_hint(self) -> str:
        return ("torch, math, numpy (dtype and ALU-op names), neuronxcc.nki (nki, nki.language, nki.isa, nki.typing) "
                "or the standalone nki package (nki, nki.language, nki.isa with dst=)")

    def has_device(self) -> bool:
        """A Neuron device and the real SDK; the interpreter is no device."""
        from kernelrl.nki.interpret import real_sdk_available

        return bool(glob.glob("/dev/neuron*")) and real_sdk_available()

    def timing_method(self, threads: int) -> str:
        return "not timed (NKI interpreter): an estimated engine cost is in the notes"

    def defines_kernel(self, tree: ast.Module) -> bool:
        """Imports neuronxcc.nki (or the nki package) and decorates a function with `nki.jit` (or `jit`)."""
        if not (imports_module(tree, "neuronxcc") or imports_module(tree, "nki")):
            return False
        return any(isinstance(node, ast.FunctionDef) and decorated_jit(node) for node in ast.walk(tree))

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


def check_nki_host_access(tree: ast.Module, source: str, backend: Backend) -> list[Any]:
    """NKI candidates: numpy is imported at module level only (there it is the dtype/op-name facade, see
    `kernelrl.nki.npfacade`), and no private attribute is named (the interpreter keeps tile values there)."""
    from kernelrl.evaluate.static import Finding

    if backend.name != "nki":
        return []
    findings = []
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n == "numpy" or n.startswith("numpy.") for n in names) and (
                id(node) not in top or any(n.startswith("numpy.") for n in names)
            ):
                findings.append(Finding("nki-host-access", "reject", "import numpy only at the top of the module, as "
                                        "`import numpy as np`: an NKI kernel uses it for dtype and ALU-op names only",
                                        node.lineno))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and node.attr not in ALLOWED_PRIVATE:
            findings.append(Finding("nki-host-access", "reject", f"private attribute {node.attr!r}: NKI tiles and "
                                    "tensors are device values; compute on them with nl/nisa instructions",
                                    node.lineno))
    return findings


def _register_static_check() -> None:
    """Registered when the backend is first made (the static module imports the backends package)."""
    from kernelrl.evaluate.static import STATIC_CHECKS

    if "nki-host-access" not in STATIC_CHECKS.names():
        STATIC_CHECKS.register("nki-host-access")(check_nki_host_access)
