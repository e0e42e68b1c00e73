"""Every shipped reference solution is correct under the real evaluation pool (forked workers, real builds)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

import kernelrl
from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, StageTimeouts, Status
from kernelrl.tasks import TaskError, load_solutions, solution_path

CONFIG = EvalConfig(
    correctness_trials=3,
    timing_trials=5,
    timing_budget_s=0.2,
    timeouts=StageTimeouts(build=120, init=30, correctness=60, timing=60),
)
# Workers are fresh interpreters: point them at this checkout's package, not whichever one is installed.
SRC = str(Path(kernelrl.__file__).resolve().parents[1])
WORKER_ENV = {"PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}


def test_solution_lookup() -> None:
    path = solution_path("level1/01_ReLU")
    assert path.name == "01_ReLU.py" and "load_cpp" in path.read_text()
    with pytest.raises(TaskError, match="no cpu reference solution"):
        solution_path("level1/02_LeakyReLU")


def test_all_reference_solutions_pass_the_pool() -> None:
    solutions = load_solutions("cpu")
    levels = {s.task.level for s in solutions}
    assert len(solutions) >= 30 and levels == {1, 2, 3}
    results = {}
    with EvalPool(workers=2, config=CONFIG, env=WORKER_ENV) as pool:
        pairs = [(s.task, Candidate(s.source, backend="cpu")) for s in solutions]
        for index, result in pool.evaluate_many(pairs):
            results[solutions[index].task.id] = result
    lines = [
        f"{tid:45s} {r.status.value:10s} speedup {r.timing.speedup if r.timing else float('nan'):7.2f}"
        for tid, r in sorted(results.items())
    ]
    print("\nreference solutions (speedup over eager, 1 thread):\n" + "\n".join(lines))
    failed = {tid: r.feedback for tid, r in results.items() if r.status != Status.OK}
    assert not failed, failed
    speedups = [r.timing.speedup for r in results.values() if r.timing and r.timing.speedup]
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    print(f"geomean speedup {geomean:.2f} over {len(speedups)} solutions")
    assert len(speedups) == len(solutions)
