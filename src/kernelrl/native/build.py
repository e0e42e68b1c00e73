"""Compile a C++ or CUDA source into a shared library, cached on disk by content hash."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE_NAME = {"c++": "kernel.cpp", "cuda": "kernel.cu"}
DEFAULT_FLAGS = {
    "c++": ["-O3", "-march=native", "-fPIC", "-shared", "-std=c++17", "-fopenmp", "-Drestrict=__restrict__"],
    "cuda": ["-O3", "-shared", "-std=c++17", "-Xcompiler", "-fPIC", "-Drestrict=__restrict__"],
}
BUILD_TIMEOUT_S = float(os.environ.get("KERNELRL_BUILD_TIMEOUT", "180"))


class CompileError(RuntimeError):
    """The compiler rejected the source. `log` holds its output with paths reduced to the file name."""

    def __init__(self, message: str, log: str, source: str, file_name: str) -> None:
        super().__init__(f"{message}\n{log}".strip())
        self.log = log
        self.source = source
        self.file_name = file_name


def cache_dir() -> Path:
    """Root of kernelrl's build cache: $KERNELRL_CACHE_DIR, else ~/.cache/kernelrl."""
    root = os.environ.get("KERNELRL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kernelrl")
    return Path(root)


def compiler_for(language: str) -> str:
    if language == "c++":
        return os.environ.get("CXX", "g++")
    if language == "cuda":
        return os.environ.get("NVCC", "nvcc")
    raise ValueError(f"unknown kernel language {language!r}; use 'c++' or 'cuda'")


@functools.lru_cache(maxsize=8)
def compiler_identity(compiler: str) -> str:
    """Compiler version plus the host CPU's feature flags (builds use -march=native)."""
    path = shutil.which(compiler)
    if path is None:
        raise CompileError(f"compiler {compiler!r} was not found on PATH", "", "", "")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    cpu_flags = ""
    try:
        with open("/proc/cpuinfo") as info:
            cpu_flags = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        pass
    return hashlib.sha256(f"{path}\n{version}\n{platform.machine()}\n{cpu_flags}".encode()).hexdigest()


def cuda_arch_flags() -> list[str]:
    """-arch for the visible GPU, or nothing (nvcc's default) on a machine without one."""
    arch = os.environ.get("KERNELRL_CUDA_ARCH")
    if arch:
        return [f"-arch={arch}"]
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return [f"-arch=sm_{major}{minor}"]
    except Exception:  # no usable CUDA: compile for nvcc's default target
        pass
    return []


def build_shared_library(source: str, language: str = "c++", extra_flags: tuple[str, ...] = ()) -> Path:
    """Compile `source` into a shared library and return its path; reuse a cached build when one exists.

    The cache key covers the source, language, flags and compiler identity, so an identical kernel
    never rebuilds. The library is written atomically (rename), so concurrent builders are safe.
    """
    compiler = compiler_for(language)
    flags = [*DEFAULT_FLAGS[language], *(cuda_arch_flags() if language == "cuda" else []), *extra_flags]
    key = hashlib.sha256(
        json.dumps([source, language, flags, compiler_identity(compiler)]).encode()
    ).hexdigest()
    target = cache_dir() / "native" / key[:2] / f"{key}.so"
    if target.exists():
        return target
    if not target.parent.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:  # evaluations of other sandbox slots run as other uids and share this cache
            os.chmod(target.parent, 0o1777)
        except OSError:
            pass
    file_name = SOURCE_NAME[language]
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        src_path = Path(tmp) / file_name
        src_path.write_text(source)
        out_path = Path(tmp) / "lib.so"
        command = [compiler, *flags, str(src_path), "-o", str(out_path)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired as exc:
            raise CompileError(f"{compiler} timed out after {BUILD_TIMEOUT_S:.0f} s", "", source, file_name) from exc
        log = (proc.stdout + proc.stderr).replace(str(src_path), file_name).replace(tmp + "/", "")
        if proc.returncode != 0:
            raise CompileError(f"{compiler} failed (exit {proc.returncode})", log, source, file_name)
        try:
            os.replace(out_path, target)
        except OSError:
            if not target.exists():  # not a lost race with a concurrent builder of the same kernel
                raise
    return target
