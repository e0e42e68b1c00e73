"""The typical mistakes of a first NKI draft, as source edits of a correct kernel, and a reader that
names the mistake a piece of gym feedback points at.

NKI-Agent (compile-verify-fix on Trainium) lists what first drafts get wrong: tiles over the 128
partitions, PSUM misuse (here: accumulating in bf16), compute on HBM tensors
(missing `nl.load`), results never stored (missing `nl.store`) and wrong tiling (the ragged last tile or a
loop bound dropped). Each kind here is an edit of a correct kernel's source; `diagnose` reads only the
feedback text (error codes and messages of the NKI interpreter, the judge's mismatch report).
"""

from __future__ import annotations

import re
from collections.abc import Callable

MISTAKES = ("partition", "psum", "missing_load", "missing_store", "tiling")


def _call_span(source: str, name: str) -> tuple[int, int] | None:
    """(start, end) of the first call `name(...)` in `source`, parentheses matched."""
    start = source.find(name + "(")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len(name), len(source)):
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        if depth == 0:
            return start, i + 1
    return None


def _first_argument(call: str) -> str:
    depth = 0
    inner = call[call.index("(") + 1:-1]
    for i, ch in enumerate(inner):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            return inner[:i].strip()
    return inner.strip()


def _partition(source: str) -> str:
    return source.replace("nl.tile_size.pmax", "256")


def _psum(source: str) -> str:  # a PSUM accumulator in bf16 (PSUM accumulates in fp32 only)
    return source.replace("nl.float32, buffer=nl.psum", "nl.bfloat16, buffer=nl.psum")


def _missing_load(source: str) -> str:
    span = _call_span(source, "nl.load")
    if span is None:
        return source
    return source[:span[0]] + _first_argument(source[span[0]:span[1]]) + source[span[1]:]


def _missing_store(source: str) -> str:
    span = _call_span(source, "nl.store")
    return source if span is None else source[:span[0]] + "pass" + source[span[1]:]


def _tiling(source: str) -> str:
    ceil = re.compile(r"\((\w+) \+ (nl\.tile_size\.pmax|\w+) - 1\) // \2")
    if ceil.search(source):  # an off-by-one ceil-division: (rows - 1) // P tiles, the last tile is never done
        return ceil.sub(r"(\1 - 1) // \2", source, count=1)
    loops = list(re.finditer(r"(affine_range|static_range)\((\w+ // \w+)\)", source))
    if not loops:
        return source
    last = loops[-1]  # the innermost loop stops one tile early
    return source[:last.start(2)] + last.group(2) + " - 1" + source[last.end(2):]


EDITS: dict[str, Callable[[str], str]] = {
    "partition": _partition, "psum": _psum, "missing_load": _missing_load,
    "missing_store": _missing_store, "tiling": _tiling,
}


def applicable(source: str) -> list[str]:
    """The mistake kinds that change this kernel's source."""
    return [kind for kind in MISTAKES if EDITS[kind](source) != source]


def with_mistakes(source: str, kinds: frozenset[str] | set[str]) -> str:
    """`source` with the given mistakes made (in `MISTAKES` order, so the result is canonical)."""
    unknown = set(kinds) - set(MISTAKES)
    if unknown:
        raise ValueError(f"unknown NKI mistake kind(s) {sorted(unknown)}; known: {', '.join(MISTAKES)}")
    for kind in MISTAKES:
        if kind in kinds:
            source = EDITS[kind](source)
    return source


_CODES = {  # the NKI interpreter's error codes -> the mistake they point at
    "err-partition-dim": "partition", "err-matmul-contraction": "partition", "err-matmul-stationary-fmax": "partition",
    "err-psum-free-size": "psum", "err-psum-capacity": "psum", "err-psum-accumulate-dtype": "psum",
    "err-matmul-moving-fmax": "psum",
    "err-compute-on-hbm": "missing_load", "err-matmul-operand": "missing_load",
}
_CODE = re.compile(r"error \[(err-[a-z-]+)\]")
_MISMATCH = re.compile(r"(\d+) of (\d+) elements differ.*?got (\S+?),", re.S)


def diagnose(feedback: str) -> str | None:
    """The mistake kind the feedback text points at, or None when it names none (ok, or unreadable).

    A compile error is read from its error code; a wrong output whose every element is NaN (unwritten
    memory) means nothing was stored; any other mismatch is read as wrong tiling."""
    for code in _CODE.findall(feedback):
        if code in _CODES:
            return _CODES[code]
    m = _MISMATCH.search(feedback)
    if m:
        everything = m.group(1) == m.group(2)
        return "missing_store" if everything and m.group(3).lower().strip("\"'") == "nan" else "tiling"
    return None
