"""Compiler logs that echo nothing of files other than the candidate's own source.

A compiler quotes the lines it complains about, and its messages name tokens of them, so an
`#include "/etc/passwd"` (or one whose path a macro builds) would put that file into the feedback.
`sanitize_log` keeps diagnostics located in the candidate's file with their quoted lines; keeps the
location and message of diagnostics in the toolchain's own headers and torch's (a template error in
<algorithm> that the candidate's code caused) without their quoted lines; and drops diagnostics located anywhere
else, with the include and instantiation context lines that lead to them, leaving one line that
counts them. Lines it does not recognise are dropped unless they belong to a kept candidate
diagnostic; a few known tool lines ("compilation terminated.", "collect2: error: ...") are kept.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess

NOTE_PREFIX = "kernelrl: "  # the summary line of what was omitted starts with this

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# gcc: `PATH:LINE[:COL]: error: ...` (a primary) or `PATH:LINE:COL:   required from ...` (context).
_GCC_LOCATION = re.compile(r"(?P<path>[^\s:(][^:]*?):(?P<line>\d+)(?::\d+)?:(?P<rest>\s.*|)", re.S)
_SEVERITY = re.compile(r"\s*(?:fatal error|error|warning|note|sorry, unimplemented|internal compiler error|Error|Warning):")
# gcc context: `PATH: In function ...:`, `PATH: At global scope:`, `PATH: In instantiation of ...`, `PATH: Assembler messages:`
_GCC_CONTEXT = re.compile(r"(?P<path>[^\s:(][^:]*?): (?:In |At |Assembler messages:)")
_INCLUDED = re.compile(r"In file included from (?P<path>[^:]+?):(?P<line>\d+)(?::\d+)?[,:]")
_INCLUDED_MORE = re.compile(r" +from (?P<path>[^:]+?):(?P<line>\d+)(?::\d+)?[,:]")  # only right after the above
# nvcc (EDG front end): `PATH(LINE): error: ...`, its context: `... at line N of PATH`.
_EDG_LOCATION = re.compile(r"(?P<path>[^\s(][^(]*?)\((?P<line>\d+)\): (?P<rest>.*)", re.S)
_EDG_CONTEXT = re.compile(r"\s*(?:detected during.*|(?:instantiation|implicit generation|processing) of .*) "
                          r"at line (?P<line>\d+) of (?P<path>\S.*)")
# the linker: `PATH:(.text+0x12): undefined reference to ...`
_LINKER_LOCATION = re.compile(r"(?P<path>[^\s:(][^:]*?):\([^)]*\): ")
# Tool lines: a bare program name, or a program under /usr (the linker: `/usr/bin/ld: ...`); never a path a
# candidate could create, so a foreign file's diagnostic cannot pass for one.
_TOOL = re.compile(
    r"(?:/usr/(?:[\w+-][\w.+-]*/)*)?(?:[\w.+]+-)*(?:collect2|cc1plus|cc1|g\+\+|gcc|c\+\+|lto1|lto-wrapper"
    r"|ld(?:\.\w+)?|as|nvcc|ptxas|nvlink|fatbinary|cicc|cudafe\+\+)(?:-[\d.]+)?(?: fatal| error| warning)?\s*:\s?(?P<rest>.*)"
)
_SUMMARY = re.compile(r"compilation terminated\.|\d+ errors? detected in the compilation of .*|At end of source: .*"
                      r"|Please submit a full bug report.*|See <[^>\s]*> for instructions\.")
_EDG_DETECTED = re.compile(r"\s+detected during:")
# gcc's own assembly of the candidate (inline asm errors): the compiler's TMPDIR is its private build directory,
# whose prefix the log loses, so only the compiler can have made a file of this relative name.
_TEMPORARY_ASSEMBLY = re.compile(r"cc\w{6}\.s")

CANDIDATE, TOOLCHAIN, OTHER = "candidate", "toolchain", "other"


@functools.lru_cache(maxsize=8)
def toolchain_include_dirs(compiler: str, language: str) -> tuple[tuple[str, str], ...]:
    """The compiler's built-in include directories as `-v` lists them: (normalised, resolved) pairs."""
    if language == "cuda":
        command = [compiler, "-E", "-Xcompiler", "-v", "-x", "cu", os.devnull, "-o", os.devnull]
    else:
        command = [compiler, "-x", "c++", "-E", "-v", "-o", os.devnull, os.devnull]
    try:
        out = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    dirs: list[tuple[str, str]] = []
    listing = False
    for line in out.stderr.splitlines():
        if line.startswith("#include") and "search starts here" in line:
            listing = True
        elif line.startswith("End of search list"):
            listing = False
        elif listing and line.startswith(" ") and line.strip().startswith("/"):
            lexical, real = os.path.normpath(line.strip()), os.path.realpath(line.strip())
            if lexical != "/" and real != "/" and os.path.isdir(real):
                dirs.append((lexical, real))
    return tuple(dict.fromkeys(dirs))


@functools.lru_cache(maxsize=1)
def library_header_dirs() -> tuple[tuple[str, str], ...]:
    """Installed library headers as trusted as the toolchain's (torch's, which torch extensions include):
    (normalised, resolved) pairs. Found without importing the library."""
    import importlib.util

    dirs: list[tuple[str, str]] = []
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        include = os.path.join(os.path.dirname(spec.origin), "include")
        if os.path.isdir(include):
            dirs.append((os.path.normpath(include), os.path.realpath(include)))
    return tuple(dirs)


def _under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


class _Classifier:
    """Sorts the paths of a log into the candidate's file, the toolchain's headers and other files.

    A toolchain header must lie under one of the compiler's include directories both as written (`..`
    folded) and resolved, so neither `..` nor a symlink a candidate made can pass a file for one.
    """

    def __init__(self, file_name: str, compiler: str | None, language: str) -> None:
        self.file_name, self.compiler, self.language = file_name, compiler, language
        self._seen: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        if path == self.file_name:
            return CANDIDATE
        if path not in self._seen:
            self._seen[path] = self._classify(path)
        return self._seen[path]

    def _classify(self, path: str) -> str:
        if _TEMPORARY_ASSEMBLY.fullmatch(path):
            return TOOLCHAIN
        if not path.startswith("/") or self.compiler is None:
            return OTHER
        lexical, real = os.path.normpath(path), os.path.realpath(path)
        dirs = toolchain_include_dirs(self.compiler, self.language) + library_header_dirs()
        if any(_under(lexical, d) for d, _ in dirs) and any(_under(real, r) for _, r in dirs):
            return TOOLCHAIN
        return OTHER


def sanitize_log(log: str, file_name: str, compiler: str | None = None, language: str = "c++") -> str:
    """`log` (paths already reduced so the candidate's source is `file_name`) without the text of other files.

    `compiler`/`language` locate the toolchain's headers, whose diagnostics keep their location and
    message (None: treat every file but the candidate's as foreign). Colour codes are removed.
    """
    if not log:
        return log
    classify = _Classifier(file_name, compiler, language)
    kept: list[str] = []
    context: list[tuple[str, str]] = []  # include / function / instantiation lines waiting for their diagnostic
    owner: str | None = None  # where the last diagnostic was: lines quoted under it go with it
    omitted: list[str] = []
    unknown = 0

    def primary(line: str, path: str, number: str) -> None:
        nonlocal owner
        owner = classify(path)
        if owner == OTHER:
            omitted.append(f"{path}:{number}" if number else path)
        else:
            kept.extend(text for text, kind in context if kind != OTHER)
            kept.append(line)
        context.clear()

    chain = False  # inside an `In file included from` chain
    for raw in _ANSI.sub("", log).split("\n"):
        line = raw.rstrip("\r")
        indented = line[:1].isspace()
        if (match := _INCLUDED.fullmatch(line.rstrip())) or (chain and (match := _INCLUDED_MORE.fullmatch(line.rstrip()))):
            context.append((line, classify(match["path"])))
            chain = line.rstrip().endswith(",")
            continue
        chain = False
        if match := _GCC_CONTEXT.match(line):
            context.append((line, classify(match["path"])))
        elif match := _GCC_LOCATION.fullmatch(line):
            if _SEVERITY.match(match["rest"]):
                primary(line, match["path"], match["line"])
            else:  # `required from here`, `in expansion of macro`, ...: context of the next diagnostic
                context.append((line, classify(match["path"])))
        elif match := _EDG_LOCATION.fullmatch(line):
            primary(line, match["path"], match["line"])
        elif match := _LINKER_LOCATION.match(line):
            primary(line, match["path"], "")
        elif _SUMMARY.fullmatch(line):
            kept.append(line)
            owner = None
        elif not line.strip():
            if owner == CANDIDATE:
                kept.append(line)
            owner = None
        elif indented and owner == CANDIDATE:
            kept.append(line)  # the candidate's quoted lines, carets, fix-its, instantiation context
        elif indented and owner == TOOLCHAIN and (match := _EDG_CONTEXT.fullmatch(line)):
            if classify(match["path"]) != OTHER:
                kept.append(line)
        elif indented and owner == TOOLCHAIN and _EDG_DETECTED.fullmatch(line):
            kept.append(line)
        elif indented and owner is not None:
            pass  # quoted lines of a toolchain header or another file
        elif match := _TOOL.fullmatch(line):
            located = _GCC_LOCATION.fullmatch(match["rest"]) or _EDG_LOCATION.fullmatch(match["rest"])
            if located and classify(located["path"]) == OTHER:
                omitted.append(f"{located['path']}:{located['line']}")
            else:
                kept.append(line)
            owner = None
        else:
            unknown += 1
            owner = None
    if omitted:
        count = len(omitted)
        kept.append(f"{NOTE_PREFIX}{count} diagnostic{'s' if count != 1 else ''} in other files omitted "
                    f"(e.g. {omitted[0]})")
    if unknown:
        kept.append(f"{NOTE_PREFIX}{unknown} unrecognised compiler output line{'s' if unknown != 1 else ''} omitted")
    return "\n".join(kept)
