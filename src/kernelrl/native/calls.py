"""Per-process counts of kernel calls made through the helper (proof that the candidate's kernel ran)."""

from __future__ import annotations

from collections import Counter

_COUNTS: Counter[str] = Counter()


def record_call(name: str) -> None:
    _COUNTS[name] += 1


def call_counts() -> dict[str, int]:
    """Calls per kernel function since the last reset."""
    return dict(_COUNTS)


def reset_call_counts() -> None:
    _COUNTS.clear()
