"""`kernelrl serve --ray-address local`: a local 2-CPU Ray cluster started by the server, real HTTP.

An actor killed mid-job has the job run again on another actor; killed twice, the job ends `crashed`
with the reason. Either way the service keeps serving.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kernelrl.evaluate import Status
from kernelrl.serve.client import ServeClient
from tests.serve.helpers import CHEAP, FAST_CONFIG, TASK, WRONG, ServerProcess, sleepy

pytest.importorskip("ray", reason="Ray is not installed (pip install ray): the Ray executor is untested here")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp: Path = tmp_path_factory.mktemp("ray")
    proc = ServerProcess(tmp / "jobs.sqlite", "--ray-address", "local", "--ray-slots", "2",
                         env={"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"})
    proc.start(timeout=180)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess):
    with ServeClient(server.url) as c:
        yield c


def busy_pid(client: ServeClient, exclude: set[int] = frozenset(), timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in client.workers()["workers"]:
            if worker["busy"] and worker["pid"] not in exclude:
                return worker["pid"]
        time.sleep(0.1)
    raise AssertionError("no busy actor")


def test_jobs_run_on_ray_actors(client: ServeClient) -> None:
    workers = client.workers()
    assert workers["executor"] == "ray" and workers["capacity"] == 2
    assert len({w["pid"] for w in workers["workers"]}) == 2
    results = client.evaluate_many([(TASK, CHEAP)] * 3 + [(TASK, WRONG)], config=FAST_CONFIG)
    assert [r.status for r in results] == [Status.OK] * 3 + [Status.INCORRECT]


def test_actor_killed_mid_job_is_rerun_elsewhere_then_reported(client: ServeClient) -> None:
    job = client.submit(TASK, sleepy(3.0), config=FAST_CONFIG)
    assert client.status(job, wait_start=60)["state"] == "running"
    first = busy_pid(client)
    time.sleep(0.5)
    os.kill(first, signal.SIGKILL)
    result = client.wait(job)
    assert result.status == Status.OK, result.feedback
    assert client.workers()["restarts"] == 1

    job = client.submit(TASK, sleepy(4.0), config=FAST_CONFIG)
    assert client.status(job, wait_start=60)["state"] == "running"
    second = busy_pid(client)
    time.sleep(0.5)
    os.kill(second, signal.SIGKILL)
    third = busy_pid(client, exclude={second})
    time.sleep(0.5)
    os.kill(third, signal.SIGKILL)
    result = client.wait(job)
    assert result.status == Status.CRASHED
    assert "died twice" in result.error and "ray actor" in result.error
    assert client.workers()["restarts"] == 3
    assert client.evaluate(TASK, CHEAP, config=FAST_CONFIG).status == Status.OK
