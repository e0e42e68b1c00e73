"""A worker whose restart fails (killed while starting) must not wedge its pool slot."""

from __future__ import annotations

import os
import signal
import time

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, Status
from kernelrl.tasks import Task
from tests.serve.helpers import CHEAP, TASK, children_running, sleepy

CONFIG = EvalConfig(measure_timing=False, correctness_trials=1)
SUPERVISOR = "kernelrl.evaluate.supervisor"


def wait_for(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_failed_restart_then_next_job_still_runs() -> None:
    task = Task.from_dict(TASK)
    with EvalPool(workers=1, config=CONFIG, sandbox="none") as pool:  # kills must hit the supervisor itself
        future = pool.submit(task, Candidate(sleepy(3.0)))
        (first,) = wait_for(lambda: children_running(os.getpid(), SUPERVISOR))
        wait_for(lambda: children_running(first, ""))  # mid-job
        os.kill(first, signal.SIGKILL)
        (second,) = wait_for(lambda: [p for p in children_running(os.getpid(), SUPERVISOR) if p != first])
        os.kill(second, signal.SIGKILL)  # killed while starting: the restart fails
        result = future.result(timeout=120)
        assert result.status == Status.CRASHED and "restart failed" in result.error
        assert pool.submit(task, Candidate(CHEAP)).result(timeout=120).status == Status.OK
