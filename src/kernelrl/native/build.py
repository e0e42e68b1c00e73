"""Compile a C++ or CUDA source into a shared library, cached on disk under a keyed hash of the request."""

from __future__ import annotations

import errno
import functools
import hashlib
import hmac
import json
import os
import platform
import re
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernelrl.native.diagnostics import sanitize_log
from kernelrl.native.hardening import UNSAFE_FLAG_PREFIXES as UNSAFE_FLAG_PREFIXES
from kernelrl.native.hardening import BuildLimits, flag_refusal, include_violations
from kernelrl.native.hardening import unsafe_flag as unsafe_flag

SOURCE_NAME = {"c++": "kernel.cpp", "cuda": "kernel.cu"}
# C++17's <cmath> declares the special math functions (libstdc++'s <bits/specfun.h>), and g++ instantiates their
# templates at the end of every translation unit, precompiled header or not: about a third of a small kernel's
# build (bench/bench_build_cost.py). Builds predefine that header's include guard, so it is skipped; a build that
# fails because one of those functions is not declared (`UNDECLARED_SPECIAL_MATH` in its log, however the source
# spelled the name) is redone once without it (`run_compiler`): a source that calls them builds as C++17 says.
WITHOUT_SPECIAL_MATH = "-D_GLIBCXX_BITS_SPECFUN_H"
UNDECLARED_SPECIAL_MATH = re.compile(
    r"[\u2018'](?:std::)?(?:assoc_laguerre|assoc_legendre|beta|comp_ellint_[123]|cyl_bessel_[ijk]|cyl_neumann"
    r"|ellint_[123]|expint|hermite|laguerre|legendre|riemann_zeta|sph_bessel|sph_legendre|sph_neumann)[fl]?[\u2019'] "
    r"(?:was not declared|is not a member|has not been declared)")
# g++ links every library against libstdc++, libm, libgcc_s and libc (--as-needed keeps only those used); reading
# libstdc++'s symbol table is most of a small kernel's link (bench/bench_build_cost.py, `full_link`). A source that
# includes only C headers (`LEAN_HEADERS`) and passes no link flag is linked against the C libraries alone, with
# `-z defs`: a symbol none of them defines (operator new, say) fails that link, as does a library the toolchain lacks
# (`LINK_FAILED`: clang without libgomp, say), and it is linked once more as g++ links by default (`run_compiler`).
# Either way the library needs the same shared libraries at load time (--as-needed keeps only those used).
LEAN_LINK_FLAGS = ("-nodefaultlibs", "-Wl,-z,defs")
LEAN_LINK_LIBS = ("-lm", "-lgomp", "-lc", "-lgcc")  # after the source: a library is searched for what came before it
LEAN_HEADERS = frozenset({
    *(f"{name}.h" for name in ("assert", "ctype", "errno", "float", "inttypes", "limits", "math", "stdbool", "stddef",
                               "stdint", "stdio", "stdlib", "string", "omp", "immintrin", "x86intrin", "xmmintrin",
                               "emmintrin", "pmmintrin", "smmintrin", "nmmintrin", "arm_neon")),
    *(f"c{name}" for name in ("assert", "ctype", "errno", "float", "inttypes", "limits", "math", "stddef", "stdint",
                              "stdio", "stdlib", "string")),
    "type_traits", "limits", "utility", "array", "bit",
})
_INCLUDED = re.compile(r"#\s*include\s*[<\"]([^>\"\n]*)[>\"]")
_LINK_FLAG_PREFIXES = ("-l", "-L", "-Wl", "-Xlinker", "-static", "-shared-lib", "-nostd", "-nodefault", "-fsanitize",
                       "-fprofile", "-coverage", "--coverage", "-pg", "-rdynamic", "-specs", "--specs")
LINK_FAILED = re.compile(r"undefined (?:reference to|symbol)|ld returned|linker command failed|cannot find -l"
                         r"|unable to find library")
DEFAULT_FLAGS = {
    "c++": ["-O3", "-march=native", "-fPIC", "-shared", "-std=c++17", "-fopenmp", "-Drestrict=__restrict__", "-pipe",
            WITHOUT_SPECIAL_MATH],
    "cuda": ["-O3", "-shared", "-std=c++17", "-Xcompiler", "-fPIC", "-Drestrict=__restrict__"],
}
LIBRARY_NAME = "lib.so"  # what a build writes in its workdir
BUILD_TIMEOUT_S = float(os.environ.get("KERNELRL_BUILD_TIMEOUT", "180"))


class CompileError(RuntimeError):
    """The compiler (or the build's checks) rejected the source. `log` holds the compiler's output with paths
    reduced to the file name and nothing quoted from files other than the source (`sanitize_log`)."""

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


MAX_LOG_BYTES = 1 << 20
KEY_FILE = "native.key"  # in the cache root: the secret that names the cache's entries (0600, its owner only)


def check_flags(flags: list[str] | tuple[str, ...], language: str) -> None:
    """Raise `CompileError` for the first flag a build refuses (`native.hardening.unsafe_flag`)."""
    for flag in flags:
        message = flag_refusal(flag, language)
        if message is not None:
            raise CompileError(message, "", "", SOURCE_NAME.get(language, ""))


def check_includes(source: str, language: str) -> None:
    """Raise `CompileError` for `#include`s of absolute paths, `..` or /dev, /proc, /sys, naming their lines."""
    violations = include_violations(source)
    if violations:
        file_name = SOURCE_NAME[language]
        log = "\n".join(f"{file_name}:{line}:1: error: {text} is not allowed: it names {reason}; include only "
                        "standard and toolchain headers by their usual names" for line, text, reason in violations)
        raise CompileError("include refused before compiling", log, source, file_name)


LINKERS = ("mold", "gold", "bfd")  # g++'s -fuse-ld choices (bench/bench_build_cost.py times each)


@functools.cache
def linker_flags(language: str) -> tuple[str, ...]:
    """The link flag of a g++ build: none (the compiler's default linker) unless `KERNELRL_LINKER` names one of
    LINKERS that is installed and links an empty library (checked once per process). mold links a small kernel
    in ~16 ms against ld.bfd's ~23 (`bench_build_cost.json`), but the mold 1.10 that Debian 12 ships crashes on a
    linker script given as an input file, where ld.bfd links it: opt in, it is not the default."""
    if language != "c++":
        return ()
    wanted = os.environ.get("KERNELRL_LINKER", "").strip()
    if not wanted:
        return ()
    if wanted not in LINKERS:
        raise CompileError(f"KERNELRL_LINKER must be one of {', '.join(LINKERS)}, got {wanted!r}", "", "", "")
    if shutil.which(f"ld.{wanted}") and _links_with(wanted):
        return (f"-fuse-ld={wanted}",)
    raise CompileError(f"KERNELRL_LINKER={wanted}: g++ cannot link with ld.{wanted} here (is it installed?)", "", "", "")


def _links_with(linker: str) -> bool:
    """Whether g++ links an empty shared library with `-fuse-ld=linker` (an older g++ may not know the name)."""
    with tempfile.TemporaryDirectory() as work:
        command = [compiler_for("c++"), "-shared", f"-fuse-ld={linker}", "-x", "c++", "-", "-o", os.path.join(work, "probe.so")]
        try:
            done = subprocess.run(command, input=b"", capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0


def default_flags(language: str) -> list[str]:
    """The flags every build of `language` gets before the caller's: DEFAULT_FLAGS and the linker's."""
    return [*DEFAULT_FLAGS[language], *linker_flags(language)]


def full_flags(language: str, extra_flags: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Every compiler flag of a build: the defaults, the linker's, -arch for CUDA, then the caller's extras."""
    if language not in SOURCE_NAME:
        compiler_for(language)  # raises the unknown-language error
    return [*default_flags(language), *(cuda_arch_flags() if language == "cuda" else []), *extra_flags]


def library_path(source: str, language: str, flags: list[str]) -> Path:
    """Where the cache keeps the build of `source` with exactly `flags` (see `full_flags`).

    The name is a keyed hash (HMAC-SHA256 under `native_key`), so whoever cannot read the key cannot
    derive a library's path from its source; with the cache's directories 0711 (traversable, not
    listable) a library can only be loaded by a process that was handed its path.
    """
    request = json.dumps([source, language, flags, compiler_identity(compiler_for(language))]).encode()
    key = hmac.new(native_key(), request, hashlib.sha256).hexdigest()
    return cache_dir() / "native" / key[:2] / f"{key}.so"


_KEYS: dict[str, bytes] = {}


def native_key(root: Path | str | None = None) -> bytes:
    """The secret (32 random bytes) naming the entries of the build cache at `root` (default `cache_dir()`).

    Kept in `root/native.key`, a regular file private to this uid (the supervisors': root); made
    atomically on first use. A key file another uid owns or could read is removed and replaced (its
    old entries are then never served again); one this uid cannot open raises `PermissionError`.
    """
    path = Path(root or cache_dir()) / KEY_FILE
    cached = _KEYS.get(str(path))
    if cached is not None:
        return cached
    key = _read_key(path)
    if key is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{KEY_FILE}-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_bytes(32))
        finally:
            os.close(fd)
        try:
            os.link(scratch, path)  # the first of concurrent creators wins; the others read its key
        except FileExistsError:
            pass
        finally:
            os.unlink(scratch)
        key = _read_key(path)
        if key is None:
            raise PermissionError(f"cannot make a private build-cache key at {path}")
    _KEYS[str(path)] = key
    return key


def _read_key(path: Path) -> bytes | None:
    """The key in `path`; None if there is none or it was not private to this uid (then it is removed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        path.unlink()  # a symlink: never follow it
        return None
    try:
        info = os.fstat(fd)
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077 or not stat.S_ISREG(info.st_mode) or len(data) < 32:
        path.unlink()
        return None
    return data


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


def limited(command: list[str], limits: BuildLimits, user: int | None) -> tuple[list[str], dict[str, Any]]:
    """`command` and Popen keywords that run it under `limits` (a prlimit prefix, else a preexec function)
    as uid/gid `user` (None: this process's own)."""
    prefix = limits.command(dedicated_uid=user is not None)
    extra: dict[str, Any] = {} if prefix is not None else {"preexec_fn": functools.partial(limits.apply, user is not None)}
    command, as_user = as_uid([*(prefix or []), *command], user)
    return command, {**as_user, **extra}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_LIMIT_SIGNALS = {signal.SIGXCPU: "its CPU time limit", signal.SIGXFSZ: "its file size limit",
                  signal.SIGKILL: "a hard limit (CPU time or memory)"}


def run_compiler(
    source: str, language: str, flags: list[str], workdir: str, timeout: float, user: int | None = None,
    limits: BuildLimits | None = None, precompiled: Path | None = None,
) -> tuple[Path, str]:
    """Compile `source` in `workdir` (optionally as uid/gid `user`); the library's path and the compiler log.

    Refused flags and includes raise `CompileError` before the compiler starts (`check_flags`,
    `check_includes`). The compiler runs under `limits` (default `BuildLimits.for_build`; the process
    count only for a dedicated `user`) with `workdir` as its TMPDIR. Raises `CompileError` on failure,
    and `TimeoutError` past `timeout` (the compiler's whole process group is killed). The log has the
    temporary paths reduced to the source's file name and no text of other files (`sanitize_log`).
    `precompiled`: a trusted header of the source's own opening includes to `-include` (`native.pch`).
    """
    check_flags(flags, language)
    check_includes(source, language)
    compiler = compiler_for(language)
    file_name = SOURCE_NAME[language]
    src_path = Path(workdir) / file_name
    try:
        src_path.write_bytes(source.encode())
    except UnicodeEncodeError as exc:  # a lone surrogate, sent through the broker's JSON
        raise CompileError(f"the source is not valid Unicode text ({exc.reason})", "", source, file_name) from None
    out_path = Path(workdir) / LIBRARY_NAME
    limits = limits or BuildLimits.for_build(language, timeout)
    started = time.monotonic()
    lean = language == "c++" and lean_link(source, flags)
    returncode, log = _compile(compiler, language, flags, precompiled, src_path, workdir, timeout, user, limits, lean)
    if returncode != 0 and lean and LINK_FAILED.search(log):
        # The link failed (a library the lean link leaves out, libstdc++ for operator new, say, or one the toolchain
        # lacks): linked as g++ links. A compile error never reaches the linker, so it is not built twice.
        returncode, log = _compile(compiler, language, flags, precompiled, src_path, workdir,
                                   timeout - (time.monotonic() - started), user, limits)
    if returncode != 0 and WITHOUT_SPECIAL_MATH in flags and UNDECLARED_SPECIAL_MATH.search(log):
        # The source may call a special math function: once more with <cmath> whole (and no precompiled header,
        # which was made without it) and g++'s own link (libstdc++ has their errors), within what is left of the deadline.
        whole = [flag for flag in flags if flag != WITHOUT_SPECIAL_MATH]
        returncode, log = _compile(compiler, language, whole, None, src_path, workdir,
                                   timeout - (time.monotonic() - started), user, limits)
    if returncode != 0:
        limit = _LIMIT_SIGNALS.get(-returncode)
        why = f"killed by {limit}" if limit else f"exit {returncode}"
        raise CompileError(f"{compiler} failed ({why})", log, source, file_name)
    if not out_path.is_file():
        raise CompileError(f"{compiler} made no library (a flag stopped it before linking)", log, source, file_name)
    return out_path, log


def lean_link(source: str, flags: list[str] | tuple[str, ...]) -> bool:
    """Whether a g++ build of `source` with `flags` is first linked against the C libraries alone
    (`LEAN_LINK_LIBS`): it includes only `LEAN_HEADERS` and no flag changes what the link pulls in."""
    if any(flag.startswith(_LINK_FLAG_PREFIXES) for flag in flags):
        return False
    return all(name.strip() in LEAN_HEADERS for name in _INCLUDED.findall(source))


def compile_command(compiler: str, flags: list[str] | tuple[str, ...], precompiled: Path | str | None, source_path: str,
                    out_path: str, lean: bool = False) -> list[str]:
    """The compiler's argument list for one build (`lean`: linked against `LEAN_LINK_LIBS` alone, `-z defs`)."""
    pch = ["-include", str(precompiled)] if precompiled is not None else []
    if not lean:
        return [compiler, *flags, *pch, source_path, "-o", out_path]
    return [compiler, *flags, *LEAN_LINK_FLAGS, *pch, source_path, "-o", out_path, *LEAN_LINK_LIBS]


# Compiler messages in English whatever the locale (the retries above read them), with UTF-8 quotes.
_COMPILER_LOCALE = {"LC_ALL": "C.UTF-8", "LANGUAGE": ""}


def _compile(compiler: str, language: str, flags: list[str], precompiled: Path | None, src_path: Path, workdir: str,
             timeout: float, user: int | None, limits: BuildLimits, lean: bool = False) -> tuple[int, str]:
    """One compiler run of `run_compiler`, into `workdir`/lib.so: its exit status and its sanitized log;
    `TimeoutError` past `timeout`."""
    file_name, out_path = src_path.name, Path(workdir) / LIBRARY_NAME
    command, popen = limited(compile_command(compiler, flags, precompiled, str(src_path), str(out_path), lean), limits, user)
    with tempfile.TemporaryFile() as log_file:
        proc = subprocess.Popen(
            command, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, "TMPDIR": workdir, **_COMPILER_LOCALE}, **popen,
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
    return proc.returncode, sanitize_log(log, file_name, compiler, language)


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
        os.makedirs(target.parent.parent, mode=0o711, exist_ok=True)
        os.makedirs(target.parent, mode=0o711, exist_ok=True)
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
