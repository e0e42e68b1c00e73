"""What a build may ask of the compiler: refused flags and includes, and the resource limits of every compiler run.

Sources and flags come from untrusted candidates, so a build refuses flags that load code into the
compiler, run other programs, read option files, write or dump files anywhere, or stop before a
shared library is linked; for nvcc, which pastes its options into shell command lines, also any flag
with a character a shell treats specially. `#include` of an absolute path, a path with `..` or a file
under /dev, /proc or /sys is refused before compiling. Neither check can see include paths built by
macros, so every compiler run also gets rlimits (`BuildLimits`) and its log is filtered
(`native.diagnostics`).
"""

from __future__ import annotations

import functools
import math
import os
import re
import resource
import shutil
from dataclasses import dataclass

# A flag, or any `,`/`=`-separated piece of one (`-Wl,...`, `-Xcompiler=...`), starting with one of these is refused.
UNSAFE_FLAG_PREFIXES = (
    # load code into the compiler or replace its programs, sysroot or specs
    "-fplugin", "-iplugindir", "-B", "-specs", "--specs", "--sysroot", "-isysroot", "-wrapper", "-plugin", "--plugin",
    "-ccbin", "--compiler-bindir", "--ld-path", "-run", "--run", "-dryrun", "--dryrun",
    # read options or sources from files the source does not name
    "@", "--options-file", "-optf", "-include", "--pre-include", "-imacros",
    # write outputs, dumps, dependency files, maps, profiles or traces
    "-o", "--output", "-keep", "--keep", "-save-temps", "--save-temps", "-dumpdir", "-dumpbase", "-aux-info",
    "-M", "--generate-dependencies", "--generate-nonsystem-dependencies", "--dependency-", "--Map", "--print-map",
    "-fdump", "-fada-spec", "-fopt-info", "-fprofile", "-fauto-profile", "-ftest-coverage", "--coverage",
    "-fstack-usage", "-fcallgraph-info", "-fsave-optimization-record", "-fdeps-", "-fmodule", "-fcompare-debug",
    "-fdiagnostics-format", "-fdiagnostics-add-output", "-fdiagnostics-set-output", "-time", "--time",
    "-fdevice-time-trace", "--fdevice-time-trace", "-clean", "--clean-targets", "--out-implib", "--output-def",
    "--reproduce", "--lto-obj-path", "--thinlto-", "--print-archive-stats", "--why-extract", "--incremental",
    "--separate-debug-file",
    # forward options to tools whose options write files (assembler listings, cudafe/fatbinary/nvlink outputs)
    "-Wa,", "-Xassembler", "-Xcudafe", "--cudafe-options", "-Xfatbin", "--fatbin-options", "-Xnvlink",
    "--nvlink-options", "-Xarchive", "--archive-options",
)
# Pieces refused as a whole: flags that stop before a shared library is linked (its "library" would be
# preprocessed text, assembly or an object), and `-Wa` (assembler options, e.g. `-a=FILE` listings) split off `-Wa,...`.
REFUSED_PIECES = frozenset({
    "-Wa",
    "-E", "-S", "-c", "-fsyntax-only", "--preprocess", "--compile", "-ptx", "--ptx", "-cubin", "--cubin", "-fatbin",
    "--fatbin", "-cuda", "--cuda", "-lib", "--lib", "-optix-ir", "--optix-ir", "--device-c", "--device-w",
    "--device-link",
})
DUMP_LETTERS = re.compile(r"-d[A-Za-z]+")  # gcc's -dLETTERS dumps (-da writes every RTL dump); nvcc's -dc, -dlink
CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # newlines and NULs have no place in a flag
SHELL_SAFE = re.compile(r"[A-Za-z0-9_+\-=,./:%]*")  # nvcc runs its steps through /bin/sh with the flags pasted in
FORBIDDEN_ROOTS = ("/dev", "/proc", "/sys")
MAX_VIOLATIONS = 10  # refused includes reported per source
_OPTION_THEN_PATH = re.compile(r"(-[A-Za-z-]*)?(.*)", re.S)


def _forbidden_path(path: str) -> str | None:
    """Why `path` (a flag's value or an include's name) may not be used, or None."""
    if "\x00" in path:
        return "a path with a NUL byte"
    if re.search(r"(?:^|/)\.\.(?:/|$)", path):
        return "a path with '..'"
    if not path.startswith("/"):
        return None
    real = "/" + os.path.realpath(path).lstrip("/")
    if real == "/":
        return "the root directory"
    if any(real == root or real.startswith(root + "/") for root in FORBIDDEN_ROOTS):
        return "a device or kernel file (/dev, /proc, /sys)"
    return None


def _refusal(flag: str, language: str) -> tuple[str, str] | None:
    """`(offending piece, why)` for a refused `flag`, else None."""
    if CONTROL.search(flag):
        return flag, "it holds a control character"
    if language == "cuda" and not SHELL_SAFE.fullmatch(flag):
        return flag, "nvcc runs its steps through a shell; use only letters, digits and _+-=,./:%"
    for piece in (flag, *flag.replace("=", ",").split(",")):
        piece = piece.strip()
        if piece.startswith(UNSAFE_FLAG_PREFIXES) or piece in REFUSED_PIECES or DUMP_LETTERS.fullmatch(piece):
            return piece, (f"{piece!r} could load code into the compiler, redirect its programs or output, read "
                           "option files, write or dump files, or stop before a library is linked")
        match = _OPTION_THEN_PATH.fullmatch(piece)
        reason = _forbidden_path(match.group(2)) if match and match.group(2) else None
        if reason:
            return piece, f"{piece!r} names {reason}"
    return None


def unsafe_flag(flag: str, language: str = "c++") -> str | None:
    """The part of `flag` that a build refuses, if any.

    Forwarded values count too (`-Xcompiler -fplugin=x`, `-Wl,-Map,x`, `--compiler-options=-MF/x`): a flag
    is split on `,` and `=` and every piece is checked against `UNSAFE_FLAG_PREFIXES`, `REFUSED_PIECES`,
    gcc's `-dLETTERS` dumps and paths into /dev, /proc, /sys, `/` or through `..`. Control characters
    are refused, and for "cuda" anything but shell-safe characters.
    """
    refused = _refusal(flag, language)
    return refused[0] if refused else None


def flag_refusal(flag: str, language: str = "c++") -> str | None:
    """A message saying why `flag` is refused, or None when it may be passed to the compiler."""
    refused = _refusal(flag, language)
    if refused is None:
        return None
    return (f"compiler flag {flag!r} is not allowed ({refused[1]}); pass only optimisation, warning, -D/-I and "
            "-f/-m code-generation flags")


# Preprocessing directives that read a file, and __has_include (which opens one).
_DIRECTIVE = re.compile(r"[ \t\f\v]*(?:#|%:)[ \t\f\v]*(include_next|include|import|embed)\b[ \t\f\v]*(.*)", re.S)
_HAS_INCLUDE = re.compile(r"__has_include(?:_next)?\s*\(\s*(\"[^\"\n]*\"|<[^>\n]*>)")
# Where a comment or literal starts; each is then consumed to its end in one step, so the scan stays linear.
_LEXEME_START = re.compile(r"""//|/\*|R"([^()\\\s"]{0,16})\(|"|'""")
_LITERAL = {'"': re.compile(r'"(?:\\.|[^"\\\n])*"?'), "'": re.compile(r"'(?:\\.|[^'\\\n])*'?")}


def _blank_comments(text: str) -> str:
    """`text` with comments and raw-string contents blanked (newlines kept); other literals skipped unchanged."""
    out: list[str] = []
    pos = 0
    while (match := _LEXEME_START.search(text, pos)) is not None:
        start, token = match.start(), match.group(0)
        if token in ('"', "'"):
            end = _LITERAL[token].match(text, start).end()  # to the closing quote, else the end of the line
            out.append(text[pos:end])
            pos = end
            continue
        if token == "//":
            end = text.find("\n", start)
        elif token == "/*":
            end = text.find("*/", start + 2)
            end = end + 2 if end >= 0 else -1
        else:
            close = ")" + match.group(1) + '"'
            end = text.find(close, match.end())
            end = end + len(close) if end >= 0 else -1
        end = len(text) if end < 0 else end
        out.append(text[pos:start])
        out.append(re.sub(r"[^\n]", " ", text[start:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def include_violations(source: str) -> list[tuple[int, str, str]]:
    """`(line, directive text, reason)` for each refused `#include`/`#include_next`/`#import`/`#embed` or
    `__has_include` of `source` (1-based physical lines).

    Line splices, comments, `%:` digraphs and `??=` trigraphs are undone first; directives inside
    `#if 0` count too; at most `MAX_VIOLATIONS` are reported. An include whose name comes from a macro
    cannot be seen here. Linear in the size of the source.
    """
    if not any(word in source for word in ("include", "import", "embed")) and "\\\n" not in source:
        return []
    text = source.replace("??=", "#").replace("??/", "\\")
    logical: list[str] = []
    first_line: list[int] = []
    pending: list[str] = []
    for number, physical in enumerate(text.split("\n"), start=1):
        if not pending:
            first_line.append(number)
        if physical.rstrip(" \t\r").endswith("\\"):
            pending.append(physical.rstrip(" \t\r")[:-1])
            continue
        logical.append("".join(pending) + physical)
        pending = []
    if pending:
        logical.append("".join(pending))
    found: list[tuple[int, str, str]] = []
    for index, line in enumerate(_blank_comments("\n".join(logical)).split("\n")):
        if len(found) >= MAX_VIOLATIONS:
            break
        if "include" not in line and "import" not in line and "embed" not in line:
            continue
        names: list[str] = []
        directive = _DIRECTIVE.match(line)
        if directive:
            rest = directive.group(2).lstrip()
            close = {'"': '"', "<": ">"}.get(rest[:1])
            if close and close in rest[1:]:
                names.append(rest[: rest.index(close, 1) + 1])
        names += _HAS_INCLUDE.findall(line)
        for name in names:
            reason = "an absolute path" if name[1:].startswith("/") else None
            reason = _forbidden_path(name[1:-1]) or reason
            if reason:
                found.append((first_line[index], line.strip(), reason))
    return found


@dataclass(frozen=True)
class BuildLimits:
    """Resource limits of one compiler run (each process of it; the process count is per uid).

    `address_space_mb` bounds virtual memory (RLIMIT_AS), `cpu_s` CPU seconds (SIGXCPU, then SIGKILL two
    seconds later), `file_size_mb` any file the compiler writes (its log included), and `processes` the
    processes and threads of the uid the compiler runs as (only applied for a dedicated build uid: for a
    user's own uid it would count every process that user has). Core dumps are always off.
    """

    address_space_mb: int
    cpu_s: int
    file_size_mb: int
    processes: int

    @classmethod
    def for_build(cls, language: str, timeout: float) -> BuildLimits:
        """The limits for a `language` build with a `timeout`-second wall clock, from the environment:
        KERNELRL_BUILD_MEMORY_MB (g++, default 2048), KERNELRL_BUILD_MEMORY_MB_CUDA (nvcc, default 8192),
        KERNELRL_BUILD_CPU_S (default: the wall-clock timeout), KERNELRL_BUILD_FILE_MB (default 64) and
        KERNELRL_BUILD_PROCESSES (default 64)."""
        env = os.environ
        memory = env.get("KERNELRL_BUILD_MEMORY_MB_CUDA", "8192") if language == "cuda" else env.get(
            "KERNELRL_BUILD_MEMORY_MB", "2048")
        cpu = env.get("KERNELRL_BUILD_CPU_S") or max(1, math.ceil(timeout))
        return cls(int(memory), int(cpu), int(env.get("KERNELRL_BUILD_FILE_MB", "64")),
                   int(env.get("KERNELRL_BUILD_PROCESSES", "64")))

    def rlimits(self, dedicated_uid: bool) -> list[tuple[int, int, int]]:
        """`(resource, soft, hard)` triples, never above the caller's own hard limits (which it cannot raise)."""
        wanted = [
            (resource.RLIMIT_AS, self.address_space_mb * 2**20, self.address_space_mb * 2**20),
            (resource.RLIMIT_CPU, self.cpu_s, self.cpu_s + 2),
            (resource.RLIMIT_FSIZE, self.file_size_mb * 2**20, self.file_size_mb * 2**20),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if dedicated_uid:
            wanted.append((resource.RLIMIT_NPROC, self.processes, self.processes))
        limited = []
        for kind, soft, hard in wanted:
            cap = resource.getrlimit(kind)[1]
            if cap != resource.RLIM_INFINITY:
                soft, hard = min(soft, cap), min(hard, cap)
            limited.append((kind, soft, hard))
        return limited

    def command(self, dedicated_uid: bool) -> list[str] | None:
        """A `prlimit ... --` prefix that applies the limits and execs the compiler (~1 ms: no fork of the
        caller); None where util-linux's prlimit is missing (use `apply` in a preexec function instead)."""
        prlimit = _prlimit()
        if prlimit is None:
            return None
        names = {resource.RLIMIT_AS: "--as", resource.RLIMIT_CPU: "--cpu", resource.RLIMIT_FSIZE: "--fsize",
                 resource.RLIMIT_CORE: "--core", resource.RLIMIT_NPROC: "--nproc"}
        return [prlimit, *(f"{names[k]}={s}:{h}" for k, s, h in self.rlimits(dedicated_uid)), "--"]

    def apply(self, dedicated_uid: bool) -> None:
        """Set the limits on this process (for a preexec function)."""
        for kind, soft, hard in self.rlimits(dedicated_uid):
            resource.setrlimit(kind, (soft, hard))


@functools.lru_cache(maxsize=1)
def _prlimit() -> str | None:
    return shutil.which("prlimit")
