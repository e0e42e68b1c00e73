"""Faults: a worker killed mid-job, and the server killed (-9) and restarted mid-stream.

Every accepted job must end with exactly one result.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

from kernelrl.evaluate import Status
from kernelrl.serve.client import ServeClient
from tests.serve.helpers import CHEAP, FAST_CONFIG, TASK, ServerProcess, children_running, sleepy

SUPERVISOR = "kernelrl.evaluate.supervisor"


def wait_for(predicate, timeout: float = 60.0, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def test_worker_killed_mid_job_is_rerun_once_then_reported(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "jobs.sqlite", "--workers", "1").start()
    try:
        with ServeClient(server.url) as client:
            # Killed once: the job runs again on a fresh worker and succeeds.
            job = client.submit(TASK, sleepy(2.0), config=FAST_CONFIG)
            assert client.status(job, wait_start=30)["state"] == "running"
            (first,) = children_running(server.pid(), SUPERVISOR)
            wait_for(lambda: children_running(first, ""))  # the evaluation child is forked: mid-job
            os.kill(first, signal.SIGKILL)
            result = client.wait(job)
            assert result.status == Status.OK, result.feedback
            assert client.workers()["restarts"] == 1

            # Killed twice: the job ends `crashed`, naming the reason.
            job = client.submit(TASK, sleepy(4.0), config=FAST_CONFIG)
            assert client.status(job, wait_start=30)["state"] == "running"
            (second,) = children_running(server.pid(), SUPERVISOR)
            wait_for(lambda: children_running(second, ""))
            os.kill(second, signal.SIGKILL)
            third = wait_for(lambda: [p for p in children_running(server.pid(), SUPERVISOR) if p != second])[0]
            wait_for(lambda: children_running(third, ""), timeout=120)  # restarted and running the job again
            os.kill(third, signal.SIGKILL)
            result = client.wait(job)
            assert result.status == Status.CRASHED
            assert "died twice" in result.error and "worker" in result.error
            # ... and the service keeps serving.
            assert client.evaluate(TASK, CHEAP, config=FAST_CONFIG).status == Status.OK
    finally:
        server.stop()


def test_server_killed_and_restarted_mid_stream_loses_no_job(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite"
    server = ServerProcess(db, "--workers", "2").start()
    total = 40
    ids: dict[int, str] = {}
    errors: list[BaseException] = []

    def submitter() -> None:
        try:
            with ServeClient(server.url, retries=60, backoff_s=0.1, max_backoff_s=1.0) as c:
                for i in range(total):
                    ids[i] = c.submit(TASK, sleepy(0.2), config=FAST_CONFIG, idempotency_key=f"stream-{i}")
                    time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=submitter)
    thread.start()
    try:
        def done_count() -> int:
            with sqlite3.connect(db) as con:
                return con.execute("SELECT COUNT(*) FROM jobs WHERE state = 'done'").fetchone()[0]

        wait_for(lambda: done_count() >= 6, timeout=60)
        server.kill()  # SIGKILL mid-stream: jobs queued and running, submissions in flight
        assert done_count() < total
        server = ServerProcess(db, "--workers", "2", port=server.port)
        server.start()
        thread.join(timeout=120)
        assert not errors, errors
        assert len(ids) == total
        with ServeClient(server.url) as client:
            results = [client.wait(job_id) for job_id in ids.values()]
        assert all(r.status == Status.OK for r in results), [r.error for r in results if r.status != Status.OK]
        with sqlite3.connect(db) as con:
            rows = con.execute("SELECT id, state, completions, idempotency_key FROM jobs").fetchall()
        assert len(rows) == total  # a resubmission after the restart made no second job
        assert {r[0] for r in rows} == set(ids.values())
        assert all(state == "done" and completions == 1 for _, state, completions, _ in rows)
    finally:
        thread.join(timeout=5)
        server.stop()
