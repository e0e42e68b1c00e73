"""Compile a C++ or CUDA source into a shared library, cached on disk by content hash."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

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
        self.message = message
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


UNSAFE_FLAG_PREFIXES = (
    "-fplugin", "-B", "-specs", "--specs", "--sysroot", "-isysroot", "-wrapper", "-plugin", "--plugin", "@",
    "-o", "--output", "-ccbin", "--compiler-bindir", "-run", "--run", "--dryrun", "-keep-dir", "--keep-dir",
)
MAX_LOG_BYTES = 1 << 20


def unsafe_flag(flag: str) -> str | None:
    """The part of `flag` that would load code into the compiler or redirect its programs or output, if any.

    Forwarded values count too (`-Xcompiler -fplugin=x`, `-Wl,-plugin,x`, `--compiler-options=-B/x`), so a
    flag is split on `,` and `=` and every piece is checked against `UNSAFE_FLAG_PREFIXES`.
    """
    for piece in (flag, *flag.replace("=", ",").split(",")):
        piece = piece.strip()
        if piece.startswith(UNSAFE_FLAG_PREFIXES):
            return piece
    return None


def full_flags(language: str, extra_flags: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Every compiler flag of a build: the defaults, -arch for CUDA, then the caller's extras."""
    if language not in SOURCE_NAME:
        compiler_for(language)  # raises the unknown-language error
    return [*DEFAULT_FLAGS[language], *(cuda_arch_flags() if language == "cuda" else []), *extra_flags]


def library_path(source: str, language: str, flags: list[str]) -> Path:
    """Where the cache keeps the build of `source` with exactly `flags` (see `full_flags`)."""
    key = hashlib.sha256(
        json.dumps([source, language, flags, compiler_identity(compiler_for(language))]).encode()
    ).hexdigest()
    return cache_dir() / "native" / key[:2] / f"{key}.so"


def as_uid(command: list[str], user: int | None) -> tuple[list[str], dict[str, Any]]:
    """`command` and Popen keywords that run it as uid/gid `user` with no supplementary groups.

    util-linux's `setpriv` drops the privileges after a vfork, so starting the process costs ~2 ms;
    Popen's own `user=` forks the whole (large) calling process first (~20 ms with torch loaded).
    """
    if user is None:
        return command, {}
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={user}", f"--regid={user}", "--clear-groups", *command], {}
    return command, {"user": user, "group": user, "extra_groups": []}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_compiler(
    source: str, language: str, flags: list[str], workdir: str, timeout: float, user: int | None = None
) -> tuple[Path, str]:
    """Compile `source` in `workdir` (optionally as uid/gid `user`); the library's path and the compiler log.

    Raises `CompileError` on failure, and `TimeoutError` past `timeout` (the compiler's whole process
    group is killed). The log has the temporary paths reduced to the source's file name.
    """
    compiler = compiler_for(language)
    file_name = SOURCE_NAME[language]
    src_path = Path(workdir) / file_name
    src_path.write_text(source)
    out_path = Path(workdir) / "lib.so"
    command, as_user = as_uid([compiler, *flags, str(src_path), "-o", str(out_path)], user)
    with tempfile.TemporaryFile() as log_file:
        proc = subprocess.Popen(
            command, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True, **as_user,
        )
        # A timer kills the group at the deadline while this thread blocks in waitpid: `wait(timeout=...)`
        # polls with sleeps of up to 50 ms, which added ~40 ms to every build.
        started = time.monotonic()
        timer = threading.Timer(max(0.0, timeout), _kill_group, (proc.pid,))
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
            _kill_group(proc.pid)  # anything the compiler left running in its group
            proc.wait()
        if proc.returncode == -signal.SIGKILL and time.monotonic() - started >= timeout:
            raise TimeoutError(f"{compiler} ran past {timeout:.0f} s")
        log_file.seek(0)
        raw = log_file.read(MAX_LOG_BYTES + 1)
    log = raw[:MAX_LOG_BYTES].decode("utf-8", errors="replace") + ("\n[compiler log cut]" if len(raw) > MAX_LOG_BYTES else "")
    log = log.replace(str(src_path), file_name).replace(workdir.rstrip("/") + "/", "")
    if proc.returncode != 0:
        raise CompileError(f"{compiler} failed (exit {proc.returncode})", log, source, file_name)
    return out_path, log


class BuildBroker:
    """The child's end of a build service: requests out on `request_fd`, replies in on `reply_fd` (JSON lines).

    Installed by the evaluator before candidate code runs, so builds happen in a trusted process
    that owns the shared cache; candidate code can neither choose what lands under a key nor write there.
    """

    def __init__(self, request_fd: int, reply_fd: int) -> None:
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self._buffer = b""

    def build(self, source: str, language: str, flags: list[str]) -> Path:
        data = memoryview((json.dumps({"source": source, "language": language, "flags": flags}) + "\n").encode())
        while data:
            data = data[os.write(self.request_fd, data):]
        while b"\n" not in self._buffer:
            chunk = os.read(self.reply_fd, 1 << 16)
            if not chunk:
                raise RuntimeError("the evaluator's build service closed its channel")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply = json.loads(line)
        if "path" in reply:
            return Path(reply["path"])
        raise CompileError(reply["message"], reply["log"], source, reply["file_name"])


_BROKER: BuildBroker | None = None


def set_build_broker(broker: BuildBroker | None) -> None:
    """Route `build_shared_library` through `broker` (None: build locally, the default)."""
    global _BROKER
    _BROKER = broker


def build_shared_library(source: str, language: str = "c++", extra_flags: tuple[str, ...] = ()) -> Path:
    """Compile `source` into a shared library and return its path; reuse a cached build when one exists.

    The cache key covers the source, language, flags and compiler identity, so an identical kernel
    never rebuilds. The library is written atomically (rename), so concurrent builders are safe.
    Inside an evaluation the build is done by the evaluator's build broker (`set_build_broker`).
    """
    compiler = compiler_for(language)
    if _BROKER is not None:
        return _BROKER.build(source, language, [*(cuda_arch_flags() if language == "cuda" else []), *extra_flags])
    flags = full_flags(language, extra_flags)
    target = library_path(source, language, flags)
    if target.exists():
        return target
    if not target.parent.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        try:
            out_path, _ = run_compiler(source, language, flags, tmp, BUILD_TIMEOUT_S)
        except TimeoutError as exc:
            raise CompileError(f"{compiler} timed out after {BUILD_TIMEOUT_S:.0f} s", "", source, SOURCE_NAME[language]) from exc
        try:
            os.replace(out_path, target)
        except OSError:
            if not target.exists():  # not a lost race with a concurrent builder of the same kernel
                raise
    return target
