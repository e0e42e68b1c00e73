"""The `Backend` interface: which device a candidate runs on, how it is timed, what it must contain."""

from __future__ import annotations

import ast
from typing import ClassVar

import torch

from kernelrl.registry import Registry


class Backend:
    """One way of writing kernels. Subclasses set `name` and override what differs."""

    name: ClassVar[str] = ""
    # Environment the evaluated process needs before any import (e.g. TRITON_INTERPRET=1).
    env: ClassVar[dict[str, str]] = {}
    # Modules worth importing once in the warm worker, before it forks evaluations.
    preload: ClassVar[tuple[str, ...]] = ()
    # Modules a candidate of this backend may import beyond the common ones, and common ones it may not (why).
    extra_imports: ClassVar[tuple[str, ...]] = ()
    denied_imports: ClassVar[dict[str, str]] = {}

    def has_device(self) -> bool:
        """Whether this machine can run (not only build) this backend's kernels."""
        return True

    def device(self, index: int | None = None) -> torch.device:
        return torch.device("cpu")

    def timing_meaningful(self) -> bool:
        return self.has_device()

    def timing_method(self, threads: int) -> str:
        return f"cpu monotonic clock, {threads} thread(s)"

    def defines_kernel(self, tree: ast.Module) -> bool:
        """Static evidence that the candidate defines and calls a kernel of this backend."""
        return True

    def kernel_hint(self) -> str:
        """What a candidate must do to use this backend (used in feedback)."""
        return ""

    def import_hint(self) -> str:
        """The modules a candidate may import, for feedback."""
        return "torch, math, numpy, triton and kernelrl.native"

    def notes(self) -> list[str]:
        """Caveats to record in every result (e.g. 'interpreted: timing is not meaningful')."""
        return []

    def interpreter_hints(self, source: str) -> list[str]:
        """Known limits of this machine's way of running the backend that `source` touches (used to
        explain a runtime error that may not be the candidate's fault)."""
        return []


BACKENDS: Registry[type[Backend]] = Registry("backend")


def get_backend(name: str) -> Backend:
    return BACKENDS.get(name)()


def imports_module(tree: ast.Module, module: str) -> bool:
    """Whether the source imports `module` (or something under it)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == module or a.name.startswith(module + ".") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module and (
            node.module == module or node.module.startswith(module + ".")
        ):
            return True
    return False


def decorated_jit(node: ast.FunctionDef) -> bool:
    """Whether a function is decorated with `jit` (`@nki.jit`, `@triton.jit`, `@jit`, called or not)."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "jit":
            return True
    return False


def calls_named(tree: ast.Module, names: set[str]) -> bool:
    """Whether the source calls a function whose (attribute) name is in `names`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in names:
                return True
    return False
