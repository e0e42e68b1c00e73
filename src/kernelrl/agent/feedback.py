"""Feedback for the next turn: the gym's verdict as compact JSON or concise text, within a token budget."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kernelrl.evaluate.result import EvalResult

TokenCounter = Callable[[str], int]
FEEDBACK_MODES = ("text", "json")


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate: about 4 characters per token for code and English."""
    return (len(text) + 3) // 4


def truncate_to_tokens(text: str, max_tokens: int, count: TokenCounter = approx_tokens) -> str:
    """Cut the middle of `text` until it fits `max_tokens` (head and tail hold the useful parts of logs)."""
    if max_tokens <= 0 or count(text) <= max_tokens:
        return text
    marker = "\n...[cut]...\n"
    low, high = 0, len(text)
    best = text[: max(0, max_tokens)]
    while low <= high:  # largest kept length whose head+tail fits
        keep = (low + high) // 2
        head, tail = text[: keep // 2 + keep % 2], text[len(text) - keep // 2:] if keep // 2 else ""
        candidate = head + marker + tail
        if count(candidate) <= max_tokens:
            best, low = candidate, keep + 1
        else:
            high = keep - 1
    return best


def compact_result(result: EvalResult) -> dict[str, Any]:
    """The fields of an `EvalResult` that help a model fix or speed up its kernel (JSON-serialisable)."""
    out: dict[str, Any] = {"status": str(result.status)}
    failed = next((s for s in result.stages if s.status != "ok"), None)
    if failed:
        out["stage"] = failed.name
    if result.error:
        out["error"] = result.error
    c = result.correctness
    if c:
        out["correctness"] = {"passed": c.passed, "trials": c.trials, "max_abs_error": c.max_abs_error}
    t = result.timing
    if t and t.candidate_ms is not None:
        keys = ("candidate_ms", "reference_ms", "speedup", "compiled_reference_ms", "speedup_vs_compiled")
        values = {k: getattr(t, k) for k in keys if getattr(t, k) is not None}
        out["timing"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in values.items()}
        if not t.meaningful:
            out["timing"]["meaningful"] = False
    warnings = [f["message"] for f in result.static_findings if f.get("severity") == "warn"]
    if warnings:
        out["warnings"] = warnings
    if result.notes:
        out["notes"] = result.notes
    return out


def _text(result: EvalResult) -> str:
    if result.feedback:
        return result.feedback  # the gym already writes a concise text
    c = compact_result(result)
    lines = [f"status: {c['status']}"] + ([f"stage: {c['stage']}"] if "stage" in c else [])
    lines += [c["error"]] if "error" in c else []
    return "\n".join(lines)


def format_feedback(
    result: EvalResult | None,
    mode: str = "text",
    max_tokens: int = 512,
    target_speedup: float | None = None,
    count: TokenCounter = approx_tokens,
) -> str:
    """The user message after a turn: verdict, details, and what to do next, within `max_tokens`.

    `result` is the turn's `EvalResult`, or None when the answer held no code.
    """
    if mode not in FEEDBACK_MODES:
        raise ValueError(f"feedback mode must be one of {FEEDBACK_MODES}, got {mode!r}")
    if result is None:
        return (
            "I could not find any code in your answer. Reply with the complete module (imports, kernel "
            "source and class ModelNew) in one ```python fenced block."
        )
    body = json.dumps(compact_result(result), separators=(",", ":")) if mode == "json" else _text(result)
    status = str(result.status)
    if status == "ok":
        speedup = result.timing.speedup if result.timing else None
        goal = f" (target {target_speedup:g}x)" if target_speedup else ""
        ask = (f"Your kernel is correct; speedup {speedup:.2f}x{goal}. Make it faster while keeping it correct."
               if speedup else "Your kernel is correct. Make it faster while keeping it correct.")
    elif status == "compiled":
        ask = "It compiled but could not be run here. Double-check it and return your best version."
    else:
        ask = "Fix the problem and reply with the complete corrected module in one ```python block."
    head = "Evaluation result:\n"
    budget = max_tokens - count(head) - count(ask) - 2
    return f"{head}{truncate_to_tokens(body, max(budget, 16), count)}\n\n{ask}"
