"""Anti-hacking static checks on the candidate's syntax tree (registered into `STATIC_CHECKS`).

Each check names the trick it stops and tells the model what to do instead. They are AST checks, not
regexes, so comments and strings do not trip them and aliases (`import time as t`) do not hide calls.

They are early feedback for a model, not the security boundary (the sandbox and the evaluator's own process
are): a rule that refuses honest kernels costs more than it catches, so rules are narrow. A crash is left to
the runtime (a C++ kernel may `abort()` or `throw` on a bad shape), `getattr` with a literal, public
attribute name reads what `obj.name` would, and a function may keep its compiled library in a module global.
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
DENIED_TORCH = {
    "torch.multiprocessing", "torch.distributed", "torch.testing", "torch.profiler", "torch.autograd.profiler", "torch._C",
    "torch.utils._python_dispatch",
}
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
TENSOR_HOOKS = {
    "__torch_function__", "__torch_dispatch__", "_make_subclass", "_make_wrapper_subclass", "register_forward_hook",
    "register_forward_pre_hook",
    # hooks on every module of the process (the reference's too) and ways to step out of the evaluator's dispatch mode
    "register_module_forward_hook", "register_module_forward_pre_hook", "register_module_full_backward_hook",
    "register_module_full_backward_pre_hook", "register_module_backward_hook", "_DisableTorchDispatch",
    "_disable_current_modes", "_pop_mode", "_push_mode", "_pop_mode_temporarily", "_set_torch_dispatch_mode",
    "_DisableTorchFunction", "_DisableTorchFunctionSubclass", "DisableTorchFunction", "DisableTorchFunctionSubclass",
}
# Attributes of an imported module that hand out a module the candidate may not import (`torch.os`, `torch.sys`).
MODULE_ATTRS = {
    "os", "sys", "subprocess", "ctypes", "gc", "inspect", "builtins", "importlib", "pickle", "marshal", "shutil",
    "socket", "threading", "multiprocessing", "pathlib", "io", "tempfile", "glob",
}
# Attributes that reach ctypes or dlopen from any object (`np.ctypeslib.ctypes.pythonapi`).
CTYPES_ATTRS = {"ctypeslib", "pythonapi", "PyDLL", "pydll", "CDLL", "cdll", "LoadLibrary", "load_library"}
# File readers and writers of numpy and torch, called on the module (`np.load`, `torch.save`).
FILE_FUNCS = {"load", "save", "savez", "savez_compressed", "fromfile", "memmap", "loadtxt", "savetxt", "genfromtxt",
              "fromregex", "from_file"}
FILE_METHODS = {"tofile", "open_memmap"}
# Functions that build the compiled library a module global may hold (`_lib = load_cpp(...)`).
LIBRARY_LOADERS = {"load_cpp", "load_cuda", "load_inline", "load"}
PATCHABLE_ROOTS = {"torch", "time", "math", "numpy", "np", "triton", "tl", "F", "nn", "kernelrl", "builtins", "lib"}


def _module_allowed(name: str, backend: Backend | None = None) -> bool:
    if any(name == d or name.startswith(d + ".") for d in DENIED_TORCH):
        return False
    extra, denied = (backend.extra_imports, backend.denied_imports) if backend is not None else ((), {})
    if any(name == d or name.startswith(d + ".") for d in denied):
        return False
    if name.startswith("kernelrl."):  # the helper's public API only, not its internals
        return name == "kernelrl.native" or name.removeprefix("kernelrl.native.") in NATIVE_API
    return any(name == a or name.startswith(a + ".") for a in (*ALLOWED_IMPORTS, *extra))


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return ["." * node.level + (node.module or "")]
        if node.module in ("kernelrl", "kernelrl.native"):
            return [f"{node.module}.{a.name}" for a in node.names]
        # `from torch import _C` imports the denied module itself; `from numpy import float32` imports a name
        return [
            full if any(full == d or full.startswith(d + ".") for d in DENIED_TORCH) else node.module or ""
            for full in (f"{node.module}.{a.name}" for a in node.names)
        ]
    return [a.name for a in node.names]


@STATIC_CHECKS.register("imports")
def check_imports(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    findings = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in _imported_names(node):
                if not _module_allowed(name, backend):
                    root = name.split(".")[0]
                    why = backend.denied_imports.get(root) or IMPORT_REASONS.get(root, "not needed for a kernel")
                    findings.append(Finding(
                        "imports", "reject",
                        f"import of {name!r} is not allowed ({why}); import only {backend.import_hint()}, and do "
                        "all the work in your kernel",
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


def _plain_name(name: str) -> bool:
    """A public attribute name that reaches no frame, module, interpreter or ctypes internals."""
    return (
        name.isidentifier() and not name.startswith("_")
        and name not in INTROSPECTION_ATTRS | MODULE_ATTRS | CTYPES_ATTRS
    )


def _literal_names(node: ast.expr, dotted: bool) -> list[str] | None:
    """The attribute names in a string literal (`"a.b"` when `dotted`), or None for anything computed."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    return node.value.split(".") if dotted else [node.value]


def _call_name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _plain_getattr(node: ast.Call) -> bool:
    """`getattr(obj, "name")` or `getattr(obj, "name", default)` with a plain attribute name: `obj.name`."""
    if len(node.args) not in (2, 3) or node.keywords:
        return False
    names = _literal_names(node.args[1], dotted=False)
    return names is not None and all(_plain_name(n) for n in names)


# A bare reference to one of these (`g = getattr`) would hide the call from the check; `input` is a common
# parameter name and harmless (stdin is empty), so only its calls count.
PASSED_AROUND = DYNAMIC_CALLS - {"input"}


@STATIC_CHECKS.register("dynamic-code")
def check_dynamic_calls(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    findings = []
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    getters = {"attrgetter": "attrgetter", "methodcaller": "methodcaller"}  # local name -> operator function
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            getters |= {a.asname: a.name for a in node.names if a.asname and a.name in ("attrgetter", "methodcaller")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CALLS:
            if node.func.id == "getattr" and _plain_getattr(node):
                continue
            hint = (
                "; getattr is fine with a literal, public attribute name (`getattr(self.fc, \"bias\", None)`)"
                if node.func.id == "getattr" else ""
            )
            findings.append(Finding(
                "dynamic-code", "reject",
                f"{node.func.id}() is not allowed (dynamic code, file or attribute access); write the code directly{hint}",
                node.lineno,
            ))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in PASSED_AROUND and id(node) not in called:
            findings.append(Finding(
                "dynamic-code", "reject",
                f"{node.id} is passed around instead of called (dynamic code, file or attribute access); "
                "write the code directly",
                node.lineno,
            ))
        elif isinstance(node, ast.Call) and _call_name(node.func) in getters:
            dotted = getters[_call_name(node.func) or ""] == "attrgetter"
            args = node.args if dotted else node.args[:1]
            names = [_literal_names(a, dotted) for a in args]
            if not args or any(n is None or not all(map(_plain_name, n)) for n in names):
                findings.append(Finding(
                    "dynamic-code", "reject",
                    f"{getters[_call_name(node.func) or '']}() with a computed, private or introspection name is not "
                    "allowed (attribute access by name); write the attribute access directly",
                    node.lineno,
                ))
        elif isinstance(node, ast.Attribute) and node.attr in ("attrgetter", "methodcaller") and id(node) not in called:
            findings.append(Finding(
                "dynamic-code", "reject",
                f"{node.attr} is passed around instead of called (attribute access by name); write the code directly",
                node.lineno,
            ))
    return findings


def _imported_aliases(tree: ast.Module) -> set[str]:
    """Names bound to modules by `import x`, `import x as y` and `from x import y` (y may be a module)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
    return names


def _chain(node: ast.expr) -> list[str]:
    """`a.b.c` as ["a", "b", "c"] (empty when the chain does not start at a name)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else []


@STATIC_CHECKS.register("introspection")
def check_introspection(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    findings = []
    modules = _imported_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id.startswith("__") and node.id in INTROSPECTION_ATTRS:
            findings.append(Finding(
                "introspection", "reject",
                f"{node.id} is not allowed (interpreter introspection); a kernel needs none of it", node.lineno))
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in INTROSPECTION_ATTRS:
            findings.append(Finding(
                "introspection", "reject",
                f"access to .{node.attr} is not allowed (frame, module or object introspection); "
                "a kernel needs none of it", node.lineno))
        elif node.attr in CTYPES_ATTRS:
            findings.append(Finding(
                "introspection", "reject",
                f"access to .{node.attr} is not allowed (ctypes/dlopen outside the kernel helper); "
                "call your kernel through kernelrl.native", node.lineno))
        elif node.attr in MODULE_ATTRS and (chain := _chain(node)) and chain[0] in modules:
            findings.append(Finding(
                "introspection", "reject",
                f"{'.'.join(chain)} reaches the {node.attr!r} module, which candidates may not import "
                f"({IMPORT_REASONS.get(node.attr, 'not needed for a kernel')})", node.lineno))
    return findings


@STATIC_CHECKS.register("file-access")
def check_file_access(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    """numpy's and torch's file readers and writers (and unpickling) next to the kernel."""
    findings = []
    modules = {  # local names of the numpy and torch modules themselves
        alias.asname or alias.name
        for node in ast.walk(tree) if isinstance(node, ast.Import)
        for alias in node.names if alias.name in ("numpy", "torch")
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        chain = _chain(node.func)
        name = _call_name(node.func)
        via_module = len(chain) == 2 and chain[0] in modules and chain[1] in FILE_FUNCS
        if via_module or name in FILE_METHODS:
            findings.append(Finding(
                "file-access", "reject",
                f"{ast.unparse(node.func)}() reads or writes files; a kernel computes on the tensors it is given",
                node.lineno))
        elif any(k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and not k.value.value) for k in node.keywords):
            findings.append(Finding(
                "file-access", "reject", "allow_pickle loads code along with the data; a kernel needs neither",
                node.lineno))
    return findings


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _target_chain(target: ast.expr) -> list[ast.expr]:
    """The expressions an assignment writes through: `a.b[i].c = v` writes through a.b[i].c, a.b[i] and a.b
    (not through the index `i`, so `y[torch.arange(3)] = 0` patches nothing)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [node for element in target.elts for node in _target_chain(element)]
    if isinstance(target, ast.Starred):
        return _target_chain(target.value)
    if isinstance(target, ast.Attribute | ast.Subscript):
        return [target, *_target_chain(target.value)]
    return [target]


def _scope_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of `function`'s own scope: its body without nested functions, lambdas and classes."""
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        nodes.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _holds_library(name: str, scope: list[ast.AST]) -> bool:
    """Whether every binding of `name` in a function's scope stores a compiled library (`name = load_cpp(...)`)."""
    stored = {  # Name targets assigned a loader's result directly
        id(target)
        for node in scope
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and isinstance(node.value, ast.Call) and _call_name(node.value.func) in LIBRARY_LOADERS
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
    }
    for node in scope:
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            bound_otherwise = id(node) not in stored
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound_otherwise = node.name == name
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound_otherwise = any((a.asname or a.name.split(".")[0]) == name for a in node.names)
        else:
            bound_otherwise = False
        if bound_otherwise:
            return False
    return True


def _library_globals(tree: ast.Module) -> set[int]:
    """Ids of `global` statements inside functions whose names only ever hold a compiled library."""
    allowed = set()
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            scope = _scope_nodes(function)
            for node in scope:
                if isinstance(node, ast.Global) and all(_holds_library(n, scope) for n in node.names):
                    allowed.add(id(node))
    return allowed


@STATIC_CHECKS.register("monkeypatch")
def check_monkeypatch(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    """Assigning attributes of torch, time, numpy, triton, this package (timers, comparators, ops)."""
    findings = []
    library_globals = _library_globals(tree)
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for sub in _target_chain(target):
                if isinstance(sub, ast.Attribute) and _root_name(sub) in PATCHABLE_ROOTS:
                    findings.append(Finding(
                        "monkeypatch", "reject",
                        f"assigning {ast.unparse(sub)} patches a library (timers, comparators or operators); "
                        "candidates may only define their own classes and functions",
                        node.lineno,
                    ))
        if isinstance(node, ast.Global | ast.Nonlocal) and id(node) not in library_globals:
            findings.append(Finding(
                "monkeypatch", "reject",
                "global/nonlocal state is not allowed: results must not be cached or carried across calls "
                "(a module global that only holds your compiled library, `_lib = load_cpp(...)`, is fine)",
                node.lineno,
            ))
    return findings


OVERRIDABLE_NAMESPACES = ("aten", "prims", "quantized", "_quantized")


def _overrides_torch_op(node: ast.Call) -> bool:
    """`torch.library.Library("aten", "IMPL")` or `torch.library.impl("aten::mm", ...)`: PyTorch's own
    operators replaced for every caller in the process, the reference included."""
    name = _call_name(node.func)
    values = [*node.args, *(k.value for k in node.keywords)]
    strings = [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    if name == "Library":
        first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "ns"), None)
        namespace = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        return namespace is None or namespace in OVERRIDABLE_NAMESPACES
    if name in ("impl", "register_kernel", "register_fake", "register_autograd", "_impl", "fallback"):
        return any(s.split("::")[0] in OVERRIDABLE_NAMESPACES for s in strings if "::" in s)
    return False


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
        names: list[str | None] = [
            node.name if isinstance(node, ast.FunctionDef) else node.attr if isinstance(node, ast.Attribute) else None
        ]
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
        for name in names:
            if name in TENSOR_HOOKS:
                findings.append(Finding(
                    "tensor-subclass", "reject",
                    f"{name} is not allowed: it intercepts or fakes tensor operations", getattr(node, "lineno", None)))
        if isinstance(node, ast.Call) and _overrides_torch_op(node):
            findings.append(Finding(
                "tensor-subclass", "reject",
                f"{ast.unparse(node.func)}() overrides a PyTorch operator for the whole process (the reference "
                "included); register only operators of your own namespace", node.lineno))
    return findings


# System calls and headers a compute kernel never needs; embedded C/C++/CUDA sources are scanned for them.
# Ending the process (`abort()`, `exit()`, `throw` on a bad shape) is not among them: a crash is reported as
# one at runtime. `_exit` stays: it is how a forked child or a forged verdict leaves without a trace.
# Threads are compute: std::thread, <thread>, pthread_create and std::async pass (they run on the candidate's
# pinned CPUs, and the judge stops the candidate when a call replies, so work left to a thread after the
# call cannot count). What threads could do besides compute (signals, processes, files, sockets) is refused
# by name, and a detached thread is refused as feedback: its work is lost when the candidate is stopped.
NATIVE_CALLS = {
    "fork": "processes", "vfork": "processes", "clone": "processes", "clone3": "processes", "execl": "processes",
    "execlp": "processes", "execle": "processes", "execv": "processes", "execvp": "processes", "execve": "processes",
    "execvpe": "processes", "execveat": "processes", "fexecve": "processes", "system": "processes",
    "popen": "processes", "posix_spawn": "processes", "posix_spawnp": "processes", "daemon": "processes",
    "setsid": "process control", "setpgid": "process control", "setpgrp": "process control",
    "prctl": "process control", "unshare": "process control", "setns": "process control",
    "kill": "signals", "killpg": "signals", "tgkill": "signals", "tkill": "signals", "sigqueue": "signals",
    "pidfd_open": "signals", "pidfd_send_signal": "signals", "ptrace": "process control",
    "process_vm_readv": "process control", "process_vm_writev": "process control",
    "socket": "network access", "connect": "network access", "bind": "network access", "listen": "network access",
    "fopen": "file access", "open": "file access", "openat": "file access", "creat": "file access",
    "unlink": "file access", "remove": "file access", "rename": "file access", "dlopen": "dynamic loading",
    "dlsym": "dynamic loading", "syscall": "raw system calls", "mprotect": "memory protection changes",
    "setenv": "environment access", "getenv": "environment access", "putenv": "environment access",
    "pthread_detach": "a thread that outlives the call; join every thread before the kernel returns",
    "usleep": "sleeping", "nanosleep": "sleeping",
    "sleep": "sleeping", "chdir": "file system access", "_exit": "process control", "getppid": "process control",
}
NATIVE_PATTERNS = {
    r"#\s*include\s*<(fstream|dlfcn\.h|sys/socket\.h|netinet/[\w.]+|arpa/[\w.]+|sys/ptrace\.h|signal\.h|csignal|spawn\.h)>": "a header for processes, files, network or signals",
    r"#\s*include\s*[\"<]\s*(/|[^\">\n]*\.\.)[^\">\n]*[\">]": "an include by path; include headers by name only",
    r"#\s*include\s+(?![\"<])\w+": "a computed #include",
    r"#\s*embed\b": "embedding a file",
    r"\b(__asm__|asm)\s*(volatile\s*)?\(": "inline assembly",
    r"\b_?Py(?:[A-Z][A-Za-z]*)?_[A-Za-z]\w*\s*\(": "the Python C API; a kernel never calls into the interpreter",
}


THREAD_DETACH = r"\.\s*detach\s*\(\s*\)"  # refused only in a source that makes threads (at::Tensor has detach() too)
THREAD_MAKERS = r"std::j?thread|pthread_create"


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
        found |= {
            m.group(0).strip().rstrip("(").strip(): why for pattern, why in NATIVE_PATTERNS.items() for m in re.finditer(pattern, text)
        }
        if re.search(THREAD_MAKERS, text) and re.search(THREAD_DETACH, text):
            found["detach()"] = NATIVE_CALLS["pthread_detach"]
        for name, why in sorted(found.items()):
            findings.append(Finding(
                "native-syscalls", "reject",
                f"the kernel source uses {name} ({why}); kernels may only compute on the tensors they are given",
                node.lineno,
            ))
    return findings
