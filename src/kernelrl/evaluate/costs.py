"""Where an evaluation's time goes: one breakdown per evaluation (`cost_breakdown`), summarised over a run
as p50/p95 per part (`summarise_costs`), for the run's report and the bench's results file.

Parts: the judge's stages (static, build, init, correctness, timing; timed calls, the candidate's measured
requests, and profile settling, untimed calls profiled until the coverage is settled, are parts of timing), the
reference timing measured for this evaluation (once per task and settings, by the pool), and fork and
teardown: the rest of the evaluation's wall time seen from the pool (forking the judge and the candidate,
confining them, killing and reaping them, the supervisor's messages). Fork and teardown is split further where
the supervisor measured it: spawn (from taking the job to the judge's first stage: handing the job to a judge
forked ahead, its candidate's confinement) and teardown (from the verdict to the worker being free again:
killing the pair, reading the output, removing the scratch). Beside the wall-time parts, the CPU seconds of the
evaluation's two processes: the judge's own (`judge_cpu`, from its fork to its verdict) and the candidate's
(`candidate_cpu`, every thread, read just before its kill); on cores that an RL run keeps busy, CPU is what an
evaluation costs. Reference timings, once per task and settings, are also summarised on their own
(`reference_timings`), prefetched ones included: those belong to no evaluation."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

STAGES = ("static", "build", "init", "correctness", "timing")
EVALUATION_PARTS = (*STAGES, "timed_calls", "profile_settling", "reference", "fork_teardown", "spawn", "teardown", "gym_own",
                    "total", "judge_cpu", "candidate_cpu")
PARTS = (*EVALUATION_PARTS, "reference_timings")


def cost_breakdown(result: Any, wall_s: float, reference_s: float = 0.0) -> dict[str, float]:
    """Seconds per part of one evaluation (`result`: an EvalResult; `wall_s`: the pool's wall time of the job,
    `reference_s`: of the reference timing the pool measured for it)."""
    parts = {name: result.stage_seconds(name) for name in STAGES}
    in_job = float(result.costs.get("reference", 0.0))
    parts["timed_calls"] = float(result.costs.get("timed_calls", 0.0))
    parts["profile_settling"] = float(result.costs.get("profile_settling", 0.0))
    parts["spawn"] = float(result.costs.get("spawn", 0.0))
    parts["teardown"] = float(result.costs.get("teardown", 0.0))
    parts["reference"] = reference_s + in_job
    parts["fork_teardown"] = max(0.0, wall_s - sum(parts[name] for name in STAGES) - in_job)
    parts["total"] = wall_s + reference_s
    parts["gym_own"] = max(0.0, parts["total"] - parts["timed_calls"] - parts["build"])  # all but the candidate's timed work and its build
    parts["judge_cpu"] = float(result.costs.get("judge_cpu", 0.0))
    parts["candidate_cpu"] = float(result.costs.get("candidate_cpu", 0.0))
    return parts


def summarise_costs(breakdowns: Iterable[dict[str, float]],
                    reference_timings: Iterable[float] = ()) -> dict[str, dict[str, float]]:
    """Per part: p50 and p95 in milliseconds over the evaluations that have the part (a stage an evaluation
    never reached is left out of that stage's percentiles), how many did, and the seconds summed over them.
    `reference_timings`: seconds of each reference timing the pool measured (the pool's `reference_log`)."""
    rows = list(breakdowns)
    summary: dict[str, dict[str, float]] = {}
    for part in EVALUATION_PARTS:
        values = [row[part] for row in rows if row.get(part, 0.0) > 0.0]
        if values:
            summary[part] = _percentiles(values)
    timings = list(reference_timings)
    if timings:
        summary["reference_timings"] = _percentiles(timings)
    summary["evaluations"] = {"n": float(len(rows))}
    return summary


def _percentiles(seconds: list[float]) -> dict[str, float]:
    values = sorted(1000.0 * s for s in seconds)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return {"p50_ms": statistics.median(values), "p95_ms": p95, "n": float(len(values)), "sum_s": sum(values) / 1000.0}


_ROW_NAMES = {"reference_timings": "reference timings (once per task, prefetched included)",
              "judge_cpu": "judge CPU", "candidate_cpu": "candidate CPU"}


def costs_table(summary: dict[str, dict[str, float]]) -> list[str]:
    """Markdown lines: one row per part."""
    lines = ["| part | p50 ms | p95 ms | count | sum s |", "|---|---|---|---|---|"]
    for part in PARTS:
        if part in summary:
            s = summary[part]
            name = _ROW_NAMES.get(part, part.replace("_", " "))
            total = f"{s['sum_s']:.1f}" if "sum_s" in s else ""
            lines.append(f"| {name} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {int(s['n'])} | {total} |")
    return lines
