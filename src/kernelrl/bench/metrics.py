"""Benchmark metrics: pass@k (unbiased), fast_p in two conventions, geometric-mean speedup; per turn and level.

Conventions, always labelled in reports:
- `fast_p (strict, KernelBench)`: correct AND speedup > p.
- `fast_p (at least, Dr. Kernel)`: correct AND speedup >= p.
fast_p is the expected fraction of tasks solved at that speed by ONE sample: per task the fraction of
its samples that qualify, averaged over tasks. `p = 0` counts every correct sample (the correct rate).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kernelrl.agent.records import Trajectory

P_VALUES = (0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0)
CONVENTIONS = {"strict": "correct and speedup > p (KernelBench)", "at_least": "correct and speedup >= p (Dr. Kernel)"}
BASELINES = {"eager": "speedup over eager PyTorch", "compiled": "speedup over torch.compile"}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): 1 - C(n-c, k) / C(n, k), for n samples of which c are correct."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values; None when empty."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def is_fast(correct: bool, speedup: float | None, p: float, convention: str) -> bool:
    """Whether one sample counts for fast_p under `convention`; p = 0 needs only correctness (both)."""
    if not correct:
        return False
    if p == 0.0:
        return True
    if speedup is None:
        return False
    return speedup > p if convention == "strict" else speedup >= p


@dataclass
class Outcome:
    """The verdict of one sample at one point (a turn, or best so far): correct plus its speedups."""

    correct: bool
    speedup: float | None = None
    speedup_vs_compiled: float | None = None


def fast_p(outcomes_by_task: dict[str, list[Outcome]], p: float, convention: str, baseline: str = "eager") -> float | None:
    """Mean over tasks of the fraction of samples that are correct and fast enough; None without tasks."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {list(CONVENTIONS)}")
    fractions = []
    for outcomes in outcomes_by_task.values():
        if not outcomes:
            continue
        key = "speedup" if baseline == "eager" else "speedup_vs_compiled"
        hits = sum(is_fast(o.correct, getattr(o, key), p, convention) for o in outcomes)
        fractions.append(hits / len(outcomes))
    return sum(fractions) / len(fractions) if fractions else None


def turn_outcome(trajectory: Trajectory, turn: int | None, best: bool = True) -> Outcome:
    """Best correct result among turns 0..turn (None: all turns), or with `best=False` that turn's own result.

    An episode that stopped before `turn` (target reached, policy error) carries its last turn forward.
    """
    if not best and trajectory.turns:
        turns = [trajectory.turns[min(len(trajectory.turns) - 1, len(trajectory.turns) if turn is None else turn)]]
    else:
        turns = trajectory.turns if turn is None else trajectory.turns[: turn + 1]
    correct = [t for t in turns if t.correct]
    if not correct:
        return Outcome(False)
    best = max(correct, key=lambda t: t.speedup or 0.0)
    compiled = [t.speedup_vs_compiled for t in correct if t.speedup_vs_compiled is not None]
    return Outcome(True, best.speedup, max(compiled) if compiled else None)


def summarize_outcomes(outcomes_by_task: dict[str, list[Outcome]], ks: Sequence[int] = (1,)) -> dict[str, Any]:
    """pass@k, fast_p (both conventions, both baselines), geomean speedups and the correct rate."""
    samples = [o for outs in outcomes_by_task.values() for o in outs]
    n_min = min((len(v) for v in outcomes_by_task.values()), default=0)
    out: dict[str, Any] = {"tasks": len(outcomes_by_task), "samples": len(samples)}
    out["correct_rate"] = sum(o.correct for o in samples) / len(samples) if samples else None
    out["pass_at_k"] = {
        str(k): sum(pass_at_k(len(v), sum(o.correct for o in v), k) for v in outcomes_by_task.values()) / len(outcomes_by_task)
        for k in ks if outcomes_by_task and 1 <= k <= n_min
    }
    compiled_measured = any(o.speedup_vs_compiled is not None for o in samples)
    for baseline in ("eager", "compiled"):
        if baseline == "compiled" and not compiled_measured:
            out["fast_p_compiled"] = None
            out["geomean_speedup_compiled"] = None
            continue
        suffix = "" if baseline == "eager" else "_compiled"
        out["fast_p" + suffix] = {
            conv: {f"{p:g}": fast_p(outcomes_by_task, p, conv, baseline) for p in P_VALUES} for conv in CONVENTIONS
        }
        key = "speedup" if baseline == "eager" else "speedup_vs_compiled"
        out["geomean_speedup" + suffix] = geomean(getattr(o, key) for o in samples if o.correct and getattr(o, key))
    return out


def summarize(trajectories: Sequence[Trajectory], ks: Sequence[int] | None = None) -> dict[str, Any]:
    """All metrics: overall best over turns, per turn (`by_turn`: best so far; `at_turn`: that turn's own
    result), and per level."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajectories:
        by_task[traj.task_id].append(traj)
    n_min = min((len(v) for v in by_task.values()), default=0)
    ks = sorted({k for k in (ks or (1, 5, 10, n_min)) if 1 <= k <= n_min})
    max_turns = max((len(t.turns) for t in trajectories), default=0)

    def outcomes(turn: int | None, level: Any = "all", best: bool = True) -> dict[str, list[Outcome]]:
        return {
            task: [turn_outcome(t, turn, best) for t in trajs]
            for task, trajs in by_task.items()
            if level == "all" or trajs[0].level == level
        }

    summary: dict[str, Any] = {"ks": ks, "p_values": list(P_VALUES), "conventions": CONVENTIONS}
    summary["overall"] = summarize_outcomes(outcomes(None), ks)
    summary["by_turn"] = [{"turn": i + 1, **summarize_outcomes(outcomes(i), ks)} for i in range(max_turns)]
    summary["at_turn"] = [{"turn": i + 1, **summarize_outcomes(outcomes(i, best=False), ks)} for i in range(max_turns)]
    levels = sorted({t.level for t in trajectories}, key=lambda v: (v is None, v or 0))
    summary["by_level"] = {str(level): summarize_outcomes(outcomes(None, level), ks) for level in levels}
    usage = [t.usage for t in trajectories]
    summary["usage"] = {
        "prompt_tokens": sum(u.prompt_tokens for u in usage),
        "completion_tokens": sum(u.completion_tokens for u in usage),
        "calls": sum(u.calls for u in usage),
    }
    summary["stop_reasons"] = dict(sorted(_count(t.stop_reason for t in trajectories).items()))
    return summary


def _count(items: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[item] += 1
    return counts
