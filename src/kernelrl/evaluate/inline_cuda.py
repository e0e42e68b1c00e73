"""torch `load_inline` CUDA candidates on a machine without a GPU: compile them, do not run them.

A CPU-only torch build cannot build a CUDA torch extension (no CUDA_HOME, no libtorch_cuda to link),
so on such a machine the cuda backend swaps `torch.utils.cpp_extension.load_inline` in the candidate
process for `compile_only_load_inline`: the CUDA sources go to nvcc through the build broker (against
torch's headers, as torch would compile them) and the C++ sources, with the pybind11 bindings torch
would generate for `functions`, get a syntax check by the C++ compiler against the same headers, run
alongside. Errors are the compilers' own, with lines in the candidate's sources (`#line 1` after the
headers torch adds), so feedback maps them into the candidate's file. The returned module's functions
raise if called: the judge reports such a candidate as `compiled` and never calls them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from kernelrl.native.build import (
    CompileError,
    build_shared_library,
    check_flags,
    check_includes,
    compiler_for,
)
from kernelrl.native.diagnostics import NOTE_PREFIX, sanitize_log

CPP_FILE, CUDA_FILE = "main.cpp", "kernel.cu"
STD = "-std=c++20"  # what torch's extension builder uses with its own headers
SYNTAX_TIMEOUT_S = 300.0


@lru_cache(maxsize=1)
def cuda_home() -> str | None:
    """The CUDA toolkit's root: $CUDA_HOME / $CUDA_PATH, else found from nvcc on PATH (through a wrapper
    script too, by asking nvcc where it lives), else /usr/local/cuda; None without a toolkit."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(name)
        if value and os.path.isfile(os.path.join(value, "include", "cuda_runtime.h")):
            return value
    nvcc = shutil.which(compiler_for("cuda"))
    candidates: list[str] = []
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
        try:  # a wrapper (e.g. /usr/local/bin/nvcc exec-ing the real one): nvcc's dry run names its own dir
            dry = subprocess.run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True, timeout=60)
            for line in (dry.stdout + dry.stderr).splitlines():
                if line.startswith("#$ _HERE_="):
                    candidates.append(os.path.dirname(line.split("=", 1)[1].strip()))
        except (OSError, subprocess.TimeoutExpired):
            pass
    candidates.append("/usr/local/cuda")
    for root in candidates:
        if os.path.isfile(os.path.join(root, "include", "cuda_runtime.h")):
            return os.path.normpath(root)
    return None


def set_cuda_home() -> str | None:
    """Export CUDA_HOME for builds when it is unset and a toolkit is found; the toolkit root or None."""
    home = cuda_home()
    if home is not None:
        os.environ.setdefault("CUDA_HOME", home)
    return home


def torch_include_flags(extra_include_paths: list[str] | tuple[str, ...] = ()) -> list[str]:
    """-I flags for torch's headers, Python's, the CUDA toolkit's and the caller's extra paths."""
    from torch.utils.cpp_extension import include_paths

    dirs = [*include_paths(), sysconfig.get_paths()["include"]]
    home = cuda_home()
    if home is not None:
        dirs.append(os.path.join(home, "include"))
    return [f"-I{d}" for d in [*dirs, *extra_include_paths]]


def _as_list(sources: Any) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else [str(s) for s in sources]


def _flags(flags: list[str] | None) -> list[str]:
    """The caller's flags without empty ones (torch ignores `extra_cflags=[""]`, a common idiom)."""
    return [f for f in flags or [] if f.strip()]


def _bindings(functions: Any, name: str) -> str:
    """The pybind11 module torch's load_inline generates for `functions` (a list or a name -> doc dict)."""
    if functions is None:
        return ""
    if isinstance(functions, str):
        functions = [functions]
    docs = dict(functions) if isinstance(functions, dict) else {f: f for f in functions}
    body = "\n".join(f'm.def("{f}", torch::wrap_pybind_function({f}), "{d}");' for f, d in docs.items())
    return f"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{body}\n}}\n"


_MISSING = re.compile(r"(?P<by>[^\s:]+\.\w+):\d+(?::\d+)?: fatal error: (?P<header>[\w./+-]+): No such file or directory"
                      r"|(?P<by2>[^\s(]+)\(\d+\): catastrophic error: cannot open source file \"(?P<header2>[\w./+-]+)\"")


def _missing_toolkit_headers(log: str) -> list[str]:
    """A note for each header a torch header includes that this machine's CUDA toolkit lacks (a partial
    toolkit, e.g. nvcc without cuBLAS or cuSPARSE): the machine's gap, not the candidate's error."""
    notes = []
    for match in _MISSING.finditer(log):
        by, header = match["by"] or match["by2"], match["header"] or match["header2"]
        if "/torch/include/" in by:
            lacks = "torch's CPU-only headers have" if header.startswith(("c10/", "ATen/", "torch/")) else (
                "this machine's CUDA toolkit has")
            notes.append(f"{NOTE_PREFIX}{lacks} no <{header}>, which torch's {by.split('/torch/include/', 1)[1]} "
                         "includes: not an error in the candidate's code; include lighter headers "
                         "(<c10/cuda/CUDAStream.h>, <cuda_runtime.h>) to compile here")
    return notes


class _SyntaxCheck:
    """The C++ compiler's syntax check of one source, run in the background in a private directory."""

    def __init__(self, source: str, text: str, flags: list[str]) -> None:
        self.source, self.compiler = source, compiler_for("c++")
        self.workdir = tempfile.mkdtemp(prefix="inline-")
        path = Path(self.workdir) / CPP_FILE
        path.write_text(text)
        self.log = Path(self.workdir) / "log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [self.compiler, "-fsyntax-only", *flags, str(path)], cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": self.workdir},
            )

    def cancel(self) -> None:
        """Stop the check (another compiler failed first). Where the sandbox denies signals the check is
        left to finish on its own; the evaluator kills what is left of the candidate's processes."""
        try:
            self.proc.kill()
            self.proc.wait()
        except PermissionError:
            pass
        shutil.rmtree(self.workdir, ignore_errors=True)

    def wait(self) -> None:
        """Raise `CompileError` if the source did not compile."""
        try:
            code = self.proc.wait(SYNTAX_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.cancel()
            raise CompileError(f"{self.compiler} timed out after {SYNTAX_TIMEOUT_S:.0f} s", "", self.source, CPP_FILE) from None
        finally:
            log = self.log.read_text(errors="replace")[: 1 << 20] if self.log.exists() else ""
            shutil.rmtree(self.workdir, ignore_errors=True)
        if code != 0:
            log = log.replace(os.path.join(self.workdir, CPP_FILE), CPP_FILE).replace(self.workdir.rstrip("/") + "/", "")
            log = sanitize_log(log, CPP_FILE, self.compiler, "c++")
            raise CompileError(f"{self.compiler} failed (exit {code})", log, self.source, CPP_FILE)


class NotRunExtension:
    """What `compile_only_load_inline` returns: the compiled extension's functions, which cannot run here."""

    def __init__(self, name: str, functions: list[str]) -> None:
        self.__name__ = name
        self._functions = functions

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def not_run(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{self.__name__}.{attr}: compiled with nvcc, but there is no GPU to run it on")

        return not_run


def compile_only_load_inline(
    name: str, cpp_sources: Any, cuda_sources: Any = None, sycl_sources: Any = None, functions: Any = None,
    extra_cflags: list[str] | None = None, extra_cuda_cflags: list[str] | None = None,
    extra_sycl_cflags: list[str] | None = None, extra_ldflags: list[str] | None = None,
    extra_include_paths: list[str] | None = None, build_directory: str | None = None, verbose: bool = False,
    with_cuda: bool | None = None, with_sycl: bool | None = None, is_python_module: bool = True,
    with_pytorch_error_handling: bool = True, keep_intermediates: bool = True, use_pch: bool = False,
    no_implicit_headers: bool = False,
) -> NotRunExtension:
    """`torch.utils.cpp_extension.load_inline` (same signature) that compiles and does not load.

    Raises `CompileError` with the first failing compiler's errors (nvcc's first: its errors are usually
    the candidate's kernels)."""
    if sycl_sources:
        raise CompileError("SYCL sources are not supported by the cuda backend", "", "", CPP_FILE)
    cpp, cuda = "\n".join(_as_list(cpp_sources)), "\n".join(_as_list(cuda_sources))
    includes = torch_include_flags(tuple(extra_include_paths or ()))
    # C10_CUDA_NO_CMAKE_CONFIGURE_FILE: the CPU wheel lacks c10/cuda's generated config header (it only
    # sets Windows export macros), so c10/cuda headers compile without it
    defines = [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE"]
    cpp_flags = [STD, "-w", *defines, *includes, *_flags(extra_cflags)]
    check_flags(cpp_flags, "c++")
    check_includes(cpp, "c++")
    header = "" if no_implicit_headers else "#include <torch/extension.h>\n"
    cpp_text = f"{header}#line 1\n{cpp}\n{_bindings(functions, name)}"
    check = _SyntaxCheck(cpp, cpp_text, cpp_flags)
    try:
        if cuda:
            header = "" if no_implicit_headers else "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
            # -O0: host code only (device code is still optimised by ptxas); the build proves it compiles
            flags = [STD, "-O0", "-w", *defines, *includes, *_flags(extra_cuda_cflags)]
            try:
                build_shared_library(f"{header}#line 1\n{cuda}\n", "cuda", tuple(flags))
            except CompileError as exc:
                log = "\n".join([exc.log, *_missing_toolkit_headers(exc.log)]).strip()
                raise CompileError(exc.message, log, cuda, exc.file_name or CUDA_FILE) from None
    except BaseException:
        check.cancel()
        raise
    check.wait()
    names = list(functions) if isinstance(functions, list | tuple | dict) else [functions] if functions else []
    return NotRunExtension(name, [str(n) for n in names])


def install_compile_only() -> None:
    """Make torch's `load_inline` compile-only in this process (the candidate process, no GPU)."""
    import torch.utils.cpp_extension as cpp_extension

    set_cuda_home()
    cpp_extension.load_inline = compile_only_load_inline
