"""Profiling-based rejection sampling (PRS, Dr. Kernel; KernelGYM's coverage rejection sampling):
drop correct samples with low profiling coverage from the policy loss.

The keep probability is the ramp ``p = clip((c - low) / width, 0, 1)`` (defaults ``low = 0.3``,
``width = 0.1``) of a coverage ``c``: at or below 0.3 always dropped, at or above 0.4 always kept,
linear between. Only correct turns are subject to it: incorrect turns (and turns without a verdict)
are always kept, since they carry the negative signal. Modes:

- ``per_turn``: each correct turn draws alone with ``p = ramp(c_t)`` of its own coverage;
- ``geometric``: one draw per trajectory with ``p = ramp(g)``, ``g = (prod_t c_t)^(1/n)`` the
  geometric mean of the coverages of its n correct turns; the draw decides all its correct turns
  (incorrect turns stay kept).

The mask says which turns enter the loss; it is applied after advantages (rejected turns still
count in returns and baselines), see `kernelrl.train.trainer`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from kernelrl.evaluate.result import EvalResult
from kernelrl.rewards.kernel import coverage

MODES = ("per_turn", "geometric")

#: a turn's verdict: a result, or None (no verdict: treated like an incorrect turn, kept)
Verdict = EvalResult | None


def prs_ramp(c: float, *, low: float = 0.3, width: float = 0.1) -> float:
    """The PRS keep probability of a coverage ``c``: ``clip((c - low) / width, 0, 1)``."""
    return min(1.0, max(0.0, (c - low) / width))


def prs_keep_probability(result: EvalResult, *, low: float = 0.3, width: float = 0.1) -> float:
    """``clip((coverage - low) / width, 0, 1)`` for a correct result, 1.0 otherwise."""
    if not result.correct:
        return 1.0
    return prs_ramp(coverage(result), low=low, width=width)


def _draw(p: float, rng: random.Random) -> bool:
    return p >= 1.0 or (p > 0.0 and rng.random() < p)


def geometric_coverage(coverages: Sequence[float]) -> float:
    """``(prod_t c_t)^(1/n)``; 0 when any coverage is 0, 1 for an empty sequence."""
    if not coverages:
        return 1.0
    if min(coverages) <= 0.0:
        return 0.0
    return math.exp(sum(math.log(c) for c in coverages) / len(coverages))


def prs_keep_mask(
    trajectories: Sequence[Sequence[Verdict]], *, mode: str = "per_turn",
    rng: random.Random | None = None, low: float = 0.3, width: float = 0.1,
) -> list[list[bool]]:
    """Keep decisions per turn for each trajectory (a list of per-turn verdicts).

    ``per_turn``: an independent draw per correct turn with ``p_t = ramp(c_t)``. ``geometric``: one
    draw per trajectory with ``p = ramp((prod_t c_t)^(1/n))`` over its n correct turns, applied to
    those turns. Incorrect turns and turns without a verdict (None) are always kept; a trajectory
    with no correct turn draws nothing.
    """
    if mode not in MODES:
        raise ValueError(f"unknown PRS mode {mode!r}; known: {', '.join(MODES)}")
    rng = rng or random.Random(0)
    out: list[list[bool]] = []
    for turns in trajectories:
        # coverage of each correct turn, None for the turns PRS never touches
        covs: list[float | None] = [coverage(t) if t is not None and t.correct else None for t in turns]
        if mode == "per_turn":
            out.append([True if c is None else _draw(prs_ramp(c, low=low, width=width), rng) for c in covs])
            continue
        correct = [c for c in covs if c is not None]
        keep = _draw(prs_ramp(geometric_coverage(correct), low=low, width=width), rng) if correct else True
        out.append([keep or c is None for c in covs])
    return out
