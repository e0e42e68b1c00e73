"""Profiling-based rejection sampling (PRS, Dr. Kernel): drop correct samples with low coverage.

A correct turn is kept with probability ``p = clip((coverage - 0.3) / 0.1, 0, 1)``: coverage at or
below 0.3 is always dropped, at or above 0.4 always kept, linear between. Incorrect turns are kept
(they carry the negative signal). Modes: ``per_turn`` decides each turn alone; ``geometric``
decides a whole trajectory with the geometric mean of its correct turns' keep probabilities.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from kernelrl.evaluate.result import EvalResult
from kernelrl.rewards.kernel import _result, coverage

MODES = ("per_turn", "geometric")


def prs_keep_probability(result: EvalResult | dict[str, Any], *, low: float = 0.3, width: float = 0.1) -> float:
    """``clip((coverage - low) / width, 0, 1)`` for a correct result, 1.0 otherwise."""
    r = _result(result)
    if not r.correct:
        return 1.0
    return min(1.0, max(0.0, (coverage(r) - low) / width))


def prs_keep_mask(
    trajectories: Sequence[Sequence[EvalResult | dict[str, Any]]], *, mode: str = "per_turn",
    rng: random.Random | None = None, low: float = 0.3, width: float = 0.1,
) -> list[list[bool]]:
    """Keep decisions per turn for each trajectory (a list of per-turn results).

    ``per_turn``: an independent draw per turn with its own probability. ``geometric``: one draw per
    trajectory with ``p = (prod_t p_t)^(1/n)`` over its n correct turns (1 when none), applied to all
    of its turns.
    """
    if mode not in MODES:
        raise ValueError(f"unknown PRS mode {mode!r}; known: {', '.join(MODES)}")
    rng = rng or random.Random(0)
    out: list[list[bool]] = []
    for turns in trajectories:
        probs = [prs_keep_probability(t, low=low, width=width) for t in turns]
        if mode == "per_turn":
            out.append([p >= 1.0 or (p > 0.0 and rng.random() < p) for p in probs])
            continue
        correct = [p for t, p in zip(turns, probs, strict=True) if _result(t).correct]
        if not correct:
            p = 1.0
        elif min(correct) <= 0.0:
            p = 0.0
        else:
            p = math.exp(sum(math.log(q) for q in correct) / len(correct))
        keep = p >= 1.0 or (p > 0.0 and rng.random() < p)
        out.append([keep] * len(turns))
    return out
