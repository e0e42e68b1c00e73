"""Turn task and candidate sources into modules, with tracebacks that point into their own text."""

from __future__ import annotations

import linecache
import sys
import traceback
import types

CANDIDATE_FILE = "candidate.py"
TASK_FILE = "reference.py"


def load_module(source: str, file_name: str, module_name: str) -> types.ModuleType:
    """Execute `source` as a fresh module named `module_name`; its frames show as `file_name`."""
    linecache.cache[file_name] = (len(source), None, source.splitlines(keepends=True), file_name)
    module = types.ModuleType(module_name)
    module.__file__ = file_name
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    exec(compile(source, file_name, "exec"), module.__dict__)
    return module


def describe_exception(exc: BaseException, own_files: tuple[str, ...] = (CANDIDATE_FILE,), limit: int = 4) -> str:
    """`Type: message` plus the innermost frames that are in the candidate's (or task's) own source."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in own_files]
    lines = [f"{type(exc).__name__}: {exc}".strip()]
    for frame in frames[-limit:]:
        lines.append(f"  at {frame.filename} line {frame.lineno}, in {frame.name}: {(frame.line or '').strip()}")
    return "\n".join(lines)


def source_line_offset(python_source: str, embedded: str) -> int | None:
    """Line offset of `embedded` (e.g. a C++ string) inside the candidate's Python text, if found verbatim."""
    lines = embedded.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return None
    haystack = python_source.splitlines()
    for index, line in enumerate(haystack):
        if line == lines[first] and haystack[index : index + 3] == lines[first : first + 3]:
            return index - first
    return None
