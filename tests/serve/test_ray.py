"""The Ray executor on an in-process local Ray cluster (2 CPUs): jobs, an actor killed mid-job, the service on top."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kernelrl.evaluate import Candidate, EvalConfig, Status
from kernelrl.serve.service import Service
from kernelrl.serve.store import JobStore, NewJob
from kernelrl.tasks import Task
from tests.serve.helpers import CHEAP, FAST_CONFIG, TASK, sleepy

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install ray) — the Ray executor is untested here")

CONFIG = EvalConfig(**FAST_CONFIG)


@pytest.fixture(scope="module")
def executor():
    from kernelrl.serve.ray_executor import RayExecutor

    started_here = not ray.is_initialized()
    ex = RayExecutor(ray_address="local", slots=2, config=CONFIG)
    yield ex
    ex.close()
    if started_here:
        ray.shutdown()


def busy_pid(executor, exclude: set[int] = frozenset(), timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in executor.workers()["workers"]:
            if worker["busy"] and worker["pid"] not in exclude:
                return worker["pid"]
        time.sleep(0.1)
    raise AssertionError("no busy actor")


def test_jobs_run_on_actors(executor) -> None:
    workers = executor.workers()
    assert workers["executor"] == "ray" and workers["capacity"] == 2 and len(workers["workers"]) == 2
    futures = [executor.submit(Task.from_dict(TASK), Candidate(CHEAP), CONFIG) for _ in range(4)]
    assert [f.result(timeout=120).status for f in futures] == [Status.OK] * 4


def test_actor_killed_mid_job_is_rerun_elsewhere_then_reported(executor) -> None:
    task = Task.from_dict(TASK)
    future = executor.submit(task, Candidate(sleepy(3.0)), CONFIG)
    time.sleep(1.0)
    first = busy_pid(executor)
    os.kill(first, signal.SIGKILL)
    assert future.result(timeout=180).status == Status.OK
    assert executor.restarts == 1

    future = executor.submit(task, Candidate(sleepy(4.0)), CONFIG)
    time.sleep(1.0)
    second = busy_pid(executor)
    os.kill(second, signal.SIGKILL)
    time.sleep(1.0)
    third = busy_pid(executor, exclude={second})
    os.kill(third, signal.SIGKILL)
    result = future.result(timeout=180)
    assert result.status == Status.CRASHED
    assert "died twice" in result.error and "ray actor" in result.error
    assert executor.restarts == 3
    assert executor.submit(task, Candidate(CHEAP), CONFIG).result(timeout=180).status == Status.OK


def test_service_over_ray(executor, tmp_path: Path) -> None:
    service = Service(JobStore(tmp_path / "ray.sqlite"), executor, config=CONFIG)
    try:
        jobs = [NewJob(TASK, Candidate(CHEAP).to_dict(), CONFIG.to_dict(), idempotency_key=f"r{i}") for i in range(3)]
        ids = [i for i, _, _ in service.accept(jobs)]
        deadline = time.monotonic() + 120
        while service.store.counts()["done"] < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(service.store.get(i).result["status"] == "ok" for i in ids)
    finally:
        service.close(close_executor=False)  # the module fixture owns the executor
