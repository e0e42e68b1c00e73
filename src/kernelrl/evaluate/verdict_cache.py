"""Gym verdicts shared within a run: a candidate source is judged once per task."""

from __future__ import annotations

import concurrent.futures as cf
from typing import TYPE_CHECKING

from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.result import EvalResult

if TYPE_CHECKING:
    from kernelrl.evaluate.pool import EvalPool
    from kernelrl.tasks.task import Task


class VerdictCache:
    """Pool futures keyed by (task id, candidate source): identical candidates are judged once.

    `submitted` counts candidates sent to the pool, `hits` the submissions answered from the cache."""

    def __init__(self, pool: EvalPool) -> None:
        self.pool = pool
        self._futures: dict[tuple[str, str], cf.Future[EvalResult]] = {}
        self.submitted = self.hits = 0

    def judge(self, task: Task, candidate: Candidate) -> cf.Future[EvalResult]:
        """The verdict of `candidate` on `task`: the pool's future, or the one an equal source already has."""
        key = (task.id, candidate.source)
        fut = self._futures.get(key)
        if fut is None:
            fut = self._futures[key] = self.pool.submit(task, candidate)
            self.submitted += 1
        else:
            self.hits += 1
        return fut
