"""The service over real HTTP: a `kernelrl serve` subprocess, the real client, real evaluations."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import httpx
import pytest

from kernelrl.evaluate import Candidate, Status
from kernelrl.serve.client import (
    AsyncServeClient,
    ExecutionTimeout,
    QueueTimeout,
    ServeClient,
    ServeError,
    job_body,
)
from tests.serve.helpers import CHEAP, FAST_CONFIG, TASK, WRONG, ServerProcess, free_port, sleepy

TOKEN = "test-token-123"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("serve")
    tasks = tmp / "tasks"
    tasks.mkdir()
    (tasks / "relu.py").write_text(TASK["source"])
    proc = ServerProcess(tmp / "jobs.sqlite", "--workers", "2", "--tasks", str(tasks), "--max-body-mb", "1", token=TOKEN)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess):
    with ServeClient(server.url, TOKEN, max_concurrency=8, retries=3) as c:
        yield c


@pytest.fixture
def raw(server: ServerProcess):
    with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
        yield c


def still_serving(client: ServeClient) -> None:
    assert client.health()["status"] == "ok"
    assert client.evaluate(TASK, CHEAP, config=FAST_CONFIG).status == Status.OK


def test_inline_task_and_task_id_both_evaluate(client: ServeClient) -> None:
    inline = client.evaluate(TASK, Candidate(CHEAP), config=FAST_CONFIG)
    assert inline.status == Status.OK and inline.task_id == "test/relu"
    by_id = client.evaluate("relu", CHEAP, config=FAST_CONFIG)
    assert by_id.status == Status.OK and by_id.task_id == "relu"
    wrong = client.evaluate(TASK, WRONG, config=FAST_CONFIG)
    assert wrong.status == Status.INCORRECT and "elements differ" in wrong.feedback


def test_status_and_result_endpoints(client: ServeClient) -> None:
    job_id = client.submit(TASK, CHEAP, config=FAST_CONFIG, priority=3)
    info = client.result(job_id, wait=30)
    assert info["state"] == "done" and info["result"]["status"] == "ok"
    assert info["priority"] == 3 and info["attempts"] == 1 and info["queue_s"] >= 0
    status = client.status(job_id)
    assert status["state"] == "done" and status["result"] is None


def test_idempotency_key_returns_the_same_job(client: ServeClient, raw: httpx.Client) -> None:
    body = job_body(TASK, CHEAP, config=FAST_CONFIG, idempotency_key="same-key")
    first = raw.post("/v1/jobs", json=body)
    second = raw.post("/v1/jobs", json=body)
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["job_id"] == second.json()["job_id"] and second.json()["duplicate"] is True
    conflict = raw.post("/v1/jobs", json={**body, "priority": 9})
    assert conflict.status_code == 409 and "already used" in conflict.json()["error"]
    assert client.wait(first.json()["job_id"]).status == Status.OK


def test_batch_submission(client: ServeClient) -> None:
    results = client.evaluate_many([(TASK, CHEAP), ("relu", WRONG), (TASK, CHEAP)], config=FAST_CONFIG)
    assert [r.status for r in results] == [Status.OK, Status.INCORRECT, Status.OK]


@pytest.mark.parametrize(
    ("kind", "status", "needle"),
    [
        ("malformed_json", 400, "malformed JSON"),
        ("too_large", 413, "too large"),
        ("unknown_task", 404, "unknown task id 'nope'"),
        ("unknown_backend", 422, "unknown backend 'tpu'"),
        ("invalid_task", 422, "not a KernelBench-format task"),
        ("both_tasks", 422, "exactly one of"),
        ("bad_config", 422, "bogus: unknown key"),
        ("batch_bad_item", 404, "jobs[1]: unknown task id"),
        ("missing_auth", 401, "missing auth"),
        ("wrong_auth", 403, "invalid auth token"),
        ("unknown_job", 404, "no job"),
    ],
)
def test_bad_requests_get_a_clear_4xx_and_the_service_keeps_serving(
    server: ServerProcess, raw: httpx.Client, client: ServeClient, kind: str, status: int, needle: str
) -> None:
    good = job_body(TASK, CHEAP, config=FAST_CONFIG)
    json_headers = {"content-type": "application/json"}
    if kind == "malformed_json":
        response = raw.post("/v1/jobs", content=b'{"task": {"id": ', headers=json_headers)
    elif kind == "too_large":
        response = raw.post("/v1/jobs", json={**good, "candidate": {"source": "x" * 2**21}})
    elif kind == "unknown_task":
        response = raw.post("/v1/jobs", json={**{k: v for k, v in good.items() if k != "task"}, "task_id": "nope"})
    elif kind == "unknown_backend":
        response = raw.post("/v1/jobs", json={**good, "candidate": {"source": CHEAP, "backend": "tpu"}})
    elif kind == "invalid_task":
        response = raw.post("/v1/jobs", json={**good, "task": {"id": "x", "source": "print(1)"}})
    elif kind == "both_tasks":
        response = raw.post("/v1/jobs", json={**good, "task_id": "relu"})
    elif kind == "bad_config":
        response = raw.post("/v1/jobs", json={**good, "config": {"bogus": 1}})
    elif kind == "batch_bad_item":
        bad = {**{k: v for k, v in good.items() if k != "task"}, "task_id": "nope"}
        response = raw.post("/v1/jobs/batch", json={"jobs": [good, bad]})
    elif kind == "missing_auth":
        response = httpx.post(server.url + "/v1/jobs", json=good)
    elif kind == "wrong_auth":
        response = httpx.get(server.url + "/v1/workers", headers={"authorization": "Bearer nope"})
    else:
        response = raw.get("/v1/jobs/does-not-exist/result")
    assert response.status_code == status, response.text
    assert needle in response.json()["error"]
    still_serving(client)


def test_chunked_oversized_body_is_413(raw: httpx.Client, client: ServeClient) -> None:
    def chunks():
        for _ in range(40):
            yield b"x" * 2**16

    response = raw.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    still_serving(client)


def test_health_is_open_and_workers_and_metrics_report(server: ServerProcess, client: ServeClient) -> None:
    assert httpx.get(server.url + "/v1/health").json()["status"] == "ok"
    workers = client.workers()
    assert workers["executor"] == "local" and workers["capacity"] == 2
    metrics = client.metrics()
    for family in ("kernelrl_jobs_submitted_total", 'kernelrl_jobs{state="done"}', "kernelrl_queue_latency_seconds{quantile=\"0.99\"}",
                   "kernelrl_workers 2", 'kernelrl_http_responses_total{code="201"}'):
        assert family in metrics


def test_reference_timing_is_cached_in_the_store(server: ServerProcess, client: ServeClient) -> None:
    config = {"correctness_trials": 1, "timing_trials": 3, "timing_budget_s": 0.1, "seed": 7}
    first = client.evaluate(TASK, CHEAP, config=config)
    second = client.evaluate(TASK, CHEAP, config=config)
    assert first.status == second.status == Status.OK
    assert second.timing.reference_cached and second.timing.reference_ms == first.timing.reference_ms
    with sqlite3.connect(server.db) as db:
        assert db.execute("SELECT COUNT(*) FROM reference_timing").fetchone()[0] >= 1


def test_queue_and_execution_timeouts_are_separate(client: ServeClient, raw: httpx.Client) -> None:
    busy = [client.submit(TASK, sleepy(3), config=FAST_CONFIG, priority=10) for _ in range(2)]
    pending = raw.get(f"/v1/jobs/{busy[0]}/result", params={"wait": 0})
    assert pending.status_code == 202 and pending.json()["state"] in ("queued", "running")
    assert pending.json()["result"] is None
    late = client.submit(TASK, CHEAP, config=FAST_CONFIG, priority=-5)
    with pytest.raises(QueueTimeout):
        client.wait(late, queue_timeout=0.5)
    assert client.status(late)["state"] == "cancelled"
    with pytest.raises(ExecutionTimeout):
        client.wait(busy[0], queue_timeout=30, execution_timeout=0.3)
    assert all(client.wait(j).status == Status.OK for j in busy)
    with pytest.raises(ServeError) as info:
        client.cancel(busy[0])
    assert info.value.status == 409


def test_priorities_order_the_queue(client: ServeClient) -> None:
    blockers = [client.submit(TASK, sleepy(1.5), config=FAST_CONFIG, priority=100) for _ in range(2)]
    low = client.submit(TASK, CHEAP, config=FAST_CONFIG, priority=-10)
    high = client.submit(TASK, CHEAP, config=FAST_CONFIG, priority=50)
    for job in [*blockers, low, high]:
        client.wait(job)
    assert client.status(high)["started"] <= client.status(low)["started"]


def test_async_client(server: ServerProcess) -> None:
    async def main() -> list[Status]:
        async with AsyncServeClient(server.url, TOKEN, max_concurrency=4) as c:
            assert (await c.health())["status"] == "ok"
            results = await c.evaluate_many([(TASK, CHEAP)] * 4 + [("relu", WRONG)], config=FAST_CONFIG)
            return [r.status for r in results]

    assert asyncio.run(main()) == [Status.OK] * 4 + [Status.INCORRECT]


def test_queue_limit_gives_429_and_the_client_backs_off(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "small.sqlite", "--workers", "1", "--max-queue", "1").start()
    try:
        with ServeClient(proc.url, max_concurrency=4, retries=0) as impatient:
            first = impatient.submit(TASK, sleepy(1.0), config=FAST_CONFIG)
            assert impatient.status(first, wait_start=30)["state"] == "running"
            impatient.submit(TASK, CHEAP, config=FAST_CONFIG)  # queued: the queue is now full
            with pytest.raises(ServeError) as info:
                impatient.submit(TASK, CHEAP, config=FAST_CONFIG)
            assert info.value.status == 429 and "retry later" in info.value.message
        with ServeClient(proc.url, retries=20, backoff_s=0.2, max_backoff_s=1.0) as patient:
            assert patient.evaluate(TASK, CHEAP, config=FAST_CONFIG).status == Status.OK
    finally:
        proc.stop()


def test_client_reports_an_unreachable_server() -> None:
    nobody = ServeClient(f"http://127.0.0.1:{free_port()}", retries=1, backoff_s=0.01)
    with nobody, pytest.raises(ServeError) as info:
        nobody.health()
    assert info.value.status == 0 and "cannot reach" in info.value.message
