"""Compact feedback for a language model: what happened, where, and what to fix."""

from __future__ import annotations

import re

from kernelrl.evaluate.loading import CANDIDATE_FILE, source_line_offset
from kernelrl.evaluate.result import EvalResult, Status
from kernelrl.native import CompileError
from kernelrl.native.diagnostics import NOTE_PREFIX

MAX_FEEDBACK_CHARS = 2000
MAX_LOG_LINES = 25


def truncate(text: str, limit: int = MAX_FEEDBACK_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2 - 20
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters cut] ...\n{text[-half:]}"


def compile_error_text(error: CompileError, candidate_source: str) -> str:
    """The compiler's errors, with line numbers mapped into the candidate's own Python file.

    Shown: lines with "error", the `required from here` lines that tie an error in a toolchain header to
    the candidate's code, and the build's note of what it omitted (diagnostics in other files).
    """
    offset = source_line_offset(candidate_source, error.source)
    lines = [ln for ln in error.log.splitlines() if "error" in ln or "note:" not in ln]
    if offset is not None and error.file_name:
        # gcc writes `kernel.cpp:LINE:COL`, nvcc writes `kernel.cu(LINE)`.
        pattern = re.compile(re.escape(error.file_name) + r"(?::(\d+)(:\d+)?|\((\d+)\))")

        def relocate(match: re.Match[str]) -> str:
            line = int(match.group(1) or match.group(3)) + offset
            return f"{CANDIDATE_FILE}:{line}{match.group(2) or ''}"

        lines = [pattern.sub(relocate, ln) for ln in lines]
    if not any(ln.strip() for ln in lines):  # no compiler output (a refused flag, a timeout): say why
        return "compiler error:\n" + str(error)
    errors = [ln for ln in lines if "error" in ln.lower() or ln.startswith(NOTE_PREFIX) or "required from here" in ln]
    shown = (errors or lines)[:MAX_LOG_LINES]
    more = len(errors or lines) - len(shown)
    return "compiler error:\n" + "\n".join(shown) + (f"\n... {more} more lines" if more > 0 else "")


def build_feedback(result: EvalResult) -> str:
    """A few lines: verdict, the failing stage's message, correctness and speed figures."""
    parts = [f"status: {result.status}"]
    failed = next((s for s in result.stages if s.status != "ok"), None)
    if failed is not None:
        parts.append(f"stage: {failed.name}")
    if result.error:
        parts.append(result.error)
    warnings = [f["message"] for f in result.static_findings if f["severity"] == "warn"]
    parts.extend(f"warning: {w}" for w in warnings)
    if result.status == Status.OK:
        c = result.correctness
        if c is not None:
            parts.append(f"correct on {c.passed}/{c.trials} trials (max abs error {c.max_abs_error:.2g})")
        t = result.timing
        if t is not None and t.candidate_ms is not None and t.reference_ms is not None:
            parts.append(
                f"runtime {t.candidate_ms:.3f} ms vs reference {t.reference_ms:.3f} ms: speedup {t.speedup:.2f}x"
            )
    parts.extend(f"note: {n}" for n in result.notes)
    if result.output_tail:
        parts.append("output (tail):\n" + result.output_tail[-400:])
    return truncate("\n".join(parts))
