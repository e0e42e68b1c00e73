"""Anti-hacking static checks on the candidate's syntax tree (registered into `STATIC_CHECKS`).

Each check names the trick it stops and tells the model what to do instead. They are AST checks, not
regexes, so comments and strings do not trip them and aliases (`import time as t`) do not hide calls.
"""

from __future__ import annotations

import ast

from kernelrl.evaluate.backends.base import Backend
from kernelrl.evaluate.static import STATIC_CHECKS, Finding

# Modules a candidate may import (and their submodules), minus the denied torch submodules below.
ALLOWED_IMPORTS = {
    "torch", "math", "numpy", "triton", "kernelrl.native", "typing", "functools", "itertools",
    "dataclasses", "collections", "operator", "enum", "abc", "__future__", "string", "textwrap", "numbers",
}
NATIVE_API = {"load_cpp", "load_cuda", "CompileError", "KernelLibrary", "SignatureError"}
DENIED_TORCH = {"torch.multiprocessing", "torch.distributed", "torch.testing", "torch.profiler", "torch.autograd.profiler", "torch._C"}
# Why a module is refused, when the reason is more specific than "not allowed".
IMPORT_REASONS = {
    "threading": "threads", "multiprocessing": "processes", "concurrent": "threads/processes", "asyncio": "asyncio",
    "subprocess": "processes", "os": "file, process and environment access", "sys": "interpreter access",
    "ctypes": "ctypes/dlopen outside the kernel helper", "cffi": "dlopen outside the kernel helper",
    "inspect": "frame introspection", "gc": "garbage-collector introspection", "socket": "network access",
    "urllib": "network access", "http": "network access", "requests": "network access", "pathlib": "file access",
    "io": "file access", "shutil": "file access", "time": "timer access", "timeit": "timer access",
    "signal": "process control", "builtins": "monkeypatching builtins", "importlib": "dynamic imports",
    "pickle": "arbitrary code loading", "marshal": "arbitrary code loading", "kernelrl": "evaluator internals",
}
DYNAMIC_CALLS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "open", "input", "breakpoint", "setattr", "delattr", "getattr"}
INTROSPECTION_ATTRS = {
    "_getframe", "f_back", "f_globals", "f_locals", "f_code", "__globals__", "__code__", "__builtins__",
    "__subclasses__", "gi_frame", "tb_frame", "__closure__", "__dict__", "__class__", "__bases__", "__mro__",
    "modules", "__loader__", "__spec__",
}
TENSOR_HOOKS = {"__torch_function__", "__torch_dispatch__", "_make_subclass", "_make_wrapper_subclass", "register_forward_hook", "register_forward_pre_hook"}
PATCHABLE_ROOTS = {"torch", "time", "math", "numpy", "np", "triton", "tl", "F", "nn", "kernelrl", "builtins", "lib"}


def _module_allowed(name: str) -> bool:
    if any(name == d or name.startswith(d + ".") for d in DENIED_TORCH):
        return False
    if name.startswith("kernelrl."):  # the helper's public API only, not its internals
        return name == "kernelrl.native" or name.removeprefix("kernelrl.native.") in NATIVE_API
    return any(name == a or name.startswith(a + ".") for a in ALLOWED_IMPORTS)


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return ["." * node.level + (node.module or "")]
        if node.module in ("kernelrl", "kernelrl.native"):
            return [f"{node.module}.{a.name}" for a in node.names]
        return [node.module or "" for _ in node.names]
    return [a.name for a in node.names]


@STATIC_CHECKS.register("imports")
def check_imports(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    findings = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in _imported_names(node):
                if not _module_allowed(name):
                    root = name.split(".")[0]
                    why = IMPORT_REASONS.get(root, "not needed for a kernel")
                    findings.append(Finding(
                        "imports", "reject",
                        f"import of {name!r} is not allowed ({why}); import only torch, math, numpy, triton and "
                        "kernelrl.native, and do all the work in your kernel",
                        node.lineno,
                    ))
    return findings


@STATIC_CHECKS.register("try-fallback")
def check_try(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    return [
        Finding("try-fallback", "reject",
                "try/except is not allowed: a fallback to PyTorch when the kernel fails hides the failure; "
                "let errors surface so you can fix the kernel", node.lineno)
        for node in ast.walk(tree) if isinstance(node, ast.Try | ast.TryStar)
    ]


@STATIC_CHECKS.register("dynamic-code")
def check_dynamic_calls(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    findings = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CALLS:
            findings.append(Finding(
                "dynamic-code", "reject",
                f"{node.func.id}() is not allowed (dynamic code, file or attribute access); write the code directly",
                node.lineno,
            ))
    return findings


@STATIC_CHECKS.register("introspection")
def check_introspection(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    return [
        Finding("introspection", "reject",
                f"access to .{node.attr} is not allowed (frame, module or object introspection); "
                "a kernel needs none of it", node.lineno)
        for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in INTROSPECTION_ATTRS
    ]


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


@STATIC_CHECKS.register("monkeypatch")
def check_monkeypatch(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    """Assigning attributes of torch, time, numpy, triton, this package (timers, comparators, ops)."""
    findings = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and _root_name(sub) in PATCHABLE_ROOTS:
                    findings.append(Finding(
                        "monkeypatch", "reject",
                        f"assigning {ast.unparse(sub)} patches a library (timers, comparators or operators); "
                        "candidates may only define their own classes and functions",
                        node.lineno,
                    ))
        if isinstance(node, ast.Global | ast.Nonlocal):
            findings.append(Finding(
                "monkeypatch", "reject",
                "global/nonlocal state is not allowed: results must not be cached or carried across calls",
                node.lineno,
            ))
    return findings


@STATIC_CHECKS.register("tensor-subclass")
def check_tensor_subclass(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    findings = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                text = ast.unparse(base)
                if text.endswith("Tensor") or "TorchDispatchMode" in text or "TorchFunctionMode" in text:
                    findings.append(Finding(
                        "tensor-subclass", "reject",
                        f"class {node.name}({text}) is not allowed: tensor subclasses and dispatch modes can fake "
                        "or defer outputs; return plain tensors computed by your kernel", node.lineno))
        name = node.name if isinstance(node, ast.FunctionDef) else node.attr if isinstance(node, ast.Attribute) else None
        if name in TENSOR_HOOKS:
            findings.append(Finding(
                "tensor-subclass", "reject",
                f"{name} is not allowed: it intercepts or fakes tensor operations", getattr(node, "lineno", None)))
    return findings


# System calls and headers a compute kernel never needs; embedded C/C++/CUDA sources are scanned for them.
NATIVE_CALLS = {
    "fork": "processes", "vfork": "processes", "clone": "processes", "execl": "processes", "execlp": "processes",
    "execle": "processes", "execv": "processes", "execvp": "processes", "execve": "processes", "system": "processes",
    "popen": "processes", "posix_spawn": "processes", "kill": "signals", "ptrace": "process control",
    "socket": "network access", "connect": "network access", "bind": "network access", "listen": "network access",
    "fopen": "file access", "open": "file access", "openat": "file access", "creat": "file access",
    "unlink": "file access", "remove": "file access", "rename": "file access", "dlopen": "dynamic loading",
    "dlsym": "dynamic loading", "syscall": "raw system calls", "mprotect": "memory protection changes",
    "setenv": "environment access", "getenv": "environment access", "putenv": "environment access",
    "pthread_create": "threads that outlive the call", "usleep": "sleeping", "nanosleep": "sleeping",
    "sleep": "sleeping", "chdir": "file system access", "_exit": "process control", "exit": "process control",
    "abort": "process control", "getppid": "process control",
}
NATIVE_PATTERNS = {
    r"std::thread|std::async|std::jthread": "threads that outlive the call",
    r"#\s*include\s*<(thread|future|fstream|dlfcn\.h|sys/socket\.h|netinet/[\w.]+|arpa/[\w.]+|sys/ptrace\.h|signal\.h|csignal|spawn\.h)>": "a header for processes, files, network or signals",
    r"\b(__asm__|asm)\s*(volatile\s*)?\(": "inline assembly",
}


def _native_sources(tree: ast.Module) -> list[ast.Constant]:
    return [
        node for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 20
        and ((";" in node.value and "{" in node.value) or "#include" in node.value)
    ]


@STATIC_CHECKS.register("native-syscalls")
def check_native_sources(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    """C/C++/CUDA strings may compute, not reach the operating system."""
    import re

    findings = []
    for node in _native_sources(tree):
        text = re.sub(r"//[^\n]*|/\*.*?\*/", "", node.value, flags=re.S)
        found = {m.group(1): NATIVE_CALLS[m.group(1)] for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", text) if m.group(1) in NATIVE_CALLS}
        found |= {m.group(0).strip(): why for pattern, why in NATIVE_PATTERNS.items() for m in re.finditer(pattern, text)}
        for name, why in sorted(found.items()):
            findings.append(Finding(
                "native-syscalls", "reject",
                f"the kernel source uses {name} ({why}); kernels may only compute on the tensors they are given",
                node.lineno,
            ))
    return findings
