"""Paired comparisons over seeds for the repros: a 95% t-interval of the mean paired difference and a verdict.

`paired` takes one difference per seed (arm B minus arm A, same seed, same starting checkpoint) and says
``reproduced`` when the interval lies above 0 (the claim's direction), ``not reproduced`` when it lies below,
and ``underpowered`` when it spans 0, with the seeds a 95% interval would need to exclude 0 if the observed
mean and standard deviation held.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

#: two-sided 95% quantiles t_{0.975, df} for df = 1..30
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """Student's t 0.975 quantile (table to 30 degrees of freedom, Cornish-Fisher expansion beyond)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = _Z975, float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


def seeds_needed(mean: float, sd: float, limit: int = 10_000) -> int | None:
    """The fewest seeds n >= 2 whose 95% t-interval half-width t_{n-1} sd / sqrt(n) falls below |mean|
    (None: no difference observed, or more than `limit`)."""
    if mean == 0:
        return None
    if sd == 0:
        return 2
    n = 2
    while n <= limit:
        if t975(n - 1) * sd / math.sqrt(n) < abs(mean):
            return n
        n += 1 if n < 100 else max(1, n // 20)
    return None


def paired(diffs: list[float]) -> dict[str, Any]:
    """Mean, sd, 95% t-interval and verdict of per-seed paired differences (positive: the claim holds)."""
    n = len(diffs)
    mean = statistics.fmean(diffs) if diffs else float("nan")
    if n < 2:
        return {"n": n, "diffs": list(diffs), "mean": mean, "sd": None, "ci95": None, "verdict": "underpowered",
                "seeds_needed": None, "why": "one seed gives no interval: at least 2 seeds are needed"}
    sd = statistics.stdev(diffs)
    half = t975(n - 1) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    out: dict[str, Any] = {"n": n, "diffs": list(diffs), "mean": mean, "sd": sd, "ci95": [lo, hi]}
    if lo > 0:
        return {**out, "verdict": "reproduced", "seeds_needed": None, "why": "the 95% interval lies above 0"}
    if hi < 0:
        return {**out, "verdict": "not reproduced", "seeds_needed": None,
                "why": "the 95% interval lies below 0 (the opposite direction)"}
    need = seeds_needed(mean, sd)
    why = ("the 95% interval spans 0; no difference was observed, so no number of seeds would exclude 0"
           if need is None and mean == 0 else
           f"the 95% interval spans 0; at the observed mean {mean:+.4f} and sd {sd:.4f} about {need} seeds "
           "would exclude it" if need is not None else
           f"the 95% interval spans 0; at the observed mean {mean:+.4f} and sd {sd:.4f} more than 10000 seeds "
           "would be needed")
    return {**out, "verdict": "underpowered", "seeds_needed": need, "why": why}


def verdict_line(claim: str, summary: dict[str, Any], unit: str = "") -> str:
    """One Markdown line: the claim, the mean paired difference with its interval, and the verdict."""
    ci = summary["ci95"]
    interval = f"95% CI [{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "no interval"
    return (f"**Verdict ({claim}): {summary['verdict']}.** Mean paired difference {summary['mean']:+.4f}{unit} "
            f"over {summary['n']} seed(s), {interval}; {summary['why']}.")
