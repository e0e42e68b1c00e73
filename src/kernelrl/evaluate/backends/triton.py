"""`triton`: Triton kernels. On a GPU they run for real; without one, under the Triton interpreter."""

from __future__ import annotations

import ast
import importlib.util

import torch

from kernelrl.evaluate.backends.base import BACKENDS, Backend

# Features the interpreter is known to handle badly, with what to tell the model.
INTERPRETER_GAPS = {
    "autotune": "triton.autotune is not supported by the Triton interpreter; pass fixed block sizes",
    "make_block_ptr": "block pointers (tl.make_block_ptr) are unreliable under the Triton interpreter",
    "bfloat16": "bf16 tl.dot is unreliable under the Triton interpreter; use float16 or float32 inputs",
}


@BACKENDS.register("triton")
class TritonBackend(Backend):
    name = "triton"

    def __init__(self) -> None:
        self._gpu = torch.cuda.is_available()

    @property
    def env(self) -> dict[str, str]:  # type: ignore[override]
        return {} if self._gpu else {"TRITON_INTERPRET": "1"}

    @property
    def preload(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("triton", "triton.language") if importlib.util.find_spec("triton") else ()

    def has_device(self) -> bool:
        return self._gpu

    def device(self, index: int | None = None) -> torch.device:
        return torch.device("cuda", index or 0) if self._gpu else torch.device("cpu")

    def timing_method(self, threads: int) -> str:
        return "wall clock around device-synchronised requests" if self._gpu else "not timed (Triton interpreter)"

    def defines_kernel(self, tree: ast.Module) -> bool:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for deco in node.decorator_list:
                    target = deco.func if isinstance(deco, ast.Call) else deco
                    if isinstance(target, ast.Attribute) and target.attr == "jit":
                        return True
        return False

    def kernel_hint(self) -> str:
        return "define a @triton.jit kernel and launch it from ModelNew.forward (kernel[grid](...))"

    def notes(self) -> list[str]:
        if self._gpu:
            return []
        return ["no GPU: ran under the Triton interpreter (TRITON_INTERPRET=1); timing is not meaningful"]

    def interpreter_hints(self, source: str) -> list[str]:
        """Known interpreter gaps that the source touches, to explain a failure that may not be its fault."""
        if self._gpu:
            return []
        return [hint for needle, hint in INTERPRETER_GAPS.items() if needle in source]
