"""Python client of `kernelrl serve`, sync (`ServeClient`) and async (`AsyncServeClient`), on httpx.

- a concurrency limit on requests in flight;
- backoff with jitter on 429/503 and on connection errors (e.g. while the server restarts); every
  submission carries an idempotency key, so a retried submission never makes a second job;
- separate timeouts for queueing (accepted -> started) and execution (started -> result).

>>> with ServeClient("http://127.0.0.1:8321") as client:
...     result = client.evaluate(task, candidate)      # an EvalResult
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import random
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import httpx

from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.result import EvalResult, StageReport, Status
from kernelrl.tasks.task import Task

DEFAULT_URL = "http://127.0.0.1:8321"
POLL_SLICE_S = 20.0  # longest single long-poll
RETRY_STATUS = (429, 502, 503, 504)
NETWORK_ERRORS = (httpx.TransportError,)

TaskLike = Task | dict[str, Any] | str  # a Task, a Task dict, or a task id the server knows
CandidateLike = Candidate | str  # a Candidate, or its source (backend given separately)


class ServeError(RuntimeError):
    """The server refused a request (4xx other than 429) or kept failing; `status` is the HTTP code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class QueueTimeout(TimeoutError):
    """The job did not start within the queueing timeout (it was cancelled if still queued)."""


class ExecutionTimeout(TimeoutError):
    """The job started but did not finish within the execution timeout."""


def job_body(
    task: TaskLike, candidate: CandidateLike, backend: str = "cpu", priority: int = 0,
    config: dict[str, Any] | None = None, idempotency_key: str | None = None,
) -> dict[str, Any]:
    """The JSON body of one submission (an idempotency key is generated when none is given)."""
    body: dict[str, Any] = {"priority": priority, "idempotency_key": idempotency_key or uuid.uuid4().hex}
    if isinstance(task, str):
        body["task_id"] = task
    else:
        body["task"] = task.to_dict() if isinstance(task, Task) else task
    cand = candidate if isinstance(candidate, Candidate) else Candidate(source=candidate, backend=backend)
    body["candidate"] = cand.to_dict()
    if config:
        body["config"] = config
    return body


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text[:500]


def _delay(attempt: int, response: httpx.Response | None, base: float, cap: float) -> float:
    if response is not None and response.headers.get("retry-after", "").replace(".", "", 1).isdigit():
        return min(cap, float(response.headers["retry-after"])) * random.uniform(1.0, 1.5)
    return min(cap, base * 2**attempt) * random.uniform(0.5, 1.5)


def to_result(info: dict[str, Any]) -> EvalResult:
    """The EvalResult of a finished job (a `crashed` one if the service recorded only an error)."""
    if info.get("result"):
        return EvalResult.from_dict(info["result"])
    message = info.get("error") or f"job ended {info.get('state')} without a result"
    return EvalResult(
        status=Status.CRASHED, task_id=info.get("task_id", ""), backend=info.get("backend", ""),
        stages=[StageReport(name="service", status="crashed", duration_s=0.0, message=message)],
        error=message, feedback=f"status: crashed\n{message}",
    )


class _Base:
    def __init__(
        self, url: str | None = None, token: str | None = None, *, max_concurrency: int = 16,
        queue_timeout: float = 3600.0, execution_timeout: float = 900.0, request_timeout: float = 30.0,
        retries: int = 10, backoff_s: float = 0.25, max_backoff_s: float = 8.0,
    ) -> None:
        self.url = (url or os.environ.get("KERNELRL_SERVE_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("KERNELRL_SERVE_TOKEN")
        self.headers = {"authorization": f"Bearer {token}"} if token else {}
        self.max_concurrency = max_concurrency
        self.queue_timeout = queue_timeout
        self.execution_timeout = execution_timeout
        self.request_timeout = request_timeout
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s

    def _check(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise ServeError(response.status_code, _error_message(response))
        return response.json() if response.headers.get("content-type", "").startswith("application/json") else response.text


class ServeClient(_Base):
    """Blocking client; safe to share across threads."""

    def __init__(self, url: str | None = None, token: str | None = None, **options: Any) -> None:
        super().__init__(url, token, **options)
        self._http = httpx.Client(base_url=self.url, headers=self.headers,
                                  limits=httpx.Limits(max_connections=self.max_concurrency))
        self._slots = threading.BoundedSemaphore(self.max_concurrency)

    def request(self, method: str, path: str, wait: float = 0.0, **kwargs: Any) -> Any:
        """One request, retried with backoff on 429/5xx-unavailable and network errors."""
        timeout = httpx.Timeout(self.request_timeout + wait, connect=self.request_timeout)
        for attempt in range(self.retries + 1):
            response = None
            try:
                with self._slots:
                    response = self._http.request(method, path, timeout=timeout, **kwargs)
                if response.status_code not in RETRY_STATUS:
                    return self._check(response)
            except NETWORK_ERRORS as exc:
                if attempt == self.retries:
                    raise ServeError(0, f"cannot reach {self.url}: {exc!r}") from exc
            if attempt < self.retries:
                time.sleep(_delay(attempt, response, self.backoff_s, self.max_backoff_s))
        assert response is not None
        return self._check(response)

    def submit(self, task: TaskLike, candidate: CandidateLike, **job: Any) -> str:
        """Queue one evaluation; returns the job id (`job`: backend, priority, config, idempotency_key)."""
        return self.request("POST", "/v1/jobs", json=job_body(task, candidate, **job))["job_id"]

    def submit_batch(self, bodies: list[dict[str, Any]]) -> list[str]:
        """Queue many (bodies from `job_body`) in one request; returns their job ids in order."""
        return [j["job_id"] for j in self.request("POST", "/v1/jobs/batch", json={"jobs": bodies})["jobs"]]

    def status(self, job_id: str, wait_start: float = 0.0) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{job_id}", wait=wait_start, params={"wait_start": wait_start})

    def result(self, job_id: str, wait: float = 0.0) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{job_id}/result", wait=wait, params={"wait": wait})

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/jobs/{job_id}")

    def wait(self, job_id: str, queue_timeout: float | None = None, execution_timeout: float | None = None) -> EvalResult:
        """Wait for a job: up to `queue_timeout` to start, then `execution_timeout` to finish."""
        q_deadline = time.monotonic() + (self.queue_timeout if queue_timeout is None else queue_timeout)
        while (info := self.status(job_id, wait_start=max(0.0, min(POLL_SLICE_S, q_deadline - time.monotonic()))))["state"] == "queued":
            if time.monotonic() >= q_deadline:
                try:
                    self.cancel(job_id)
                except ServeError:
                    continue  # it started meanwhile
                raise QueueTimeout(f"job {job_id} did not start within the queueing timeout")
        e_deadline = time.monotonic() + (self.execution_timeout if execution_timeout is None else execution_timeout)
        while info.get("state") not in ("done", "cancelled"):
            remaining = e_deadline - time.monotonic()
            if remaining <= 0:
                raise ExecutionTimeout(f"job {job_id} did not finish within the execution timeout")
            info = self.result(job_id, wait=min(POLL_SLICE_S, remaining))
        if info.get("result") is None and info["state"] == "done" and not info.get("error"):
            info = self.result(job_id)
        return to_result(info)

    def evaluate(self, task: TaskLike, candidate: CandidateLike, **job: Any) -> EvalResult:
        return self.wait(self.submit(task, candidate, **job))

    def evaluate_many(self, pairs: Iterable[tuple[TaskLike, CandidateLike]], batch_size: int = 64, **job: Any) -> list[EvalResult]:
        """Submit in batches, then wait on all; results in input order."""
        bodies = [job_body(t, c, **job) for t, c in pairs]
        ids = [i for start in range(0, len(bodies), batch_size) for i in self.submit_batch(bodies[start:start + batch_size])]
        with cf.ThreadPoolExecutor(max_workers=max(1, self.max_concurrency)) as threads:
            return list(threads.map(self.wait, ids))

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")

    def workers(self) -> dict[str, Any]:
        return self.request("GET", "/v1/workers")

    def metrics(self) -> str:
        return self.request("GET", "/metrics")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncServeClient(_Base):
    """asyncio client with the same methods as `ServeClient`, as coroutines."""

    def __init__(self, url: str | None = None, token: str | None = None, **options: Any) -> None:
        super().__init__(url, token, **options)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self.headers,
                                       limits=httpx.Limits(max_connections=self.max_concurrency))
        self._slots = asyncio.Semaphore(self.max_concurrency)

    async def request(self, method: str, path: str, wait: float = 0.0, **kwargs: Any) -> Any:
        timeout = httpx.Timeout(self.request_timeout + wait, connect=self.request_timeout)
        for attempt in range(self.retries + 1):
            response = None
            try:
                async with self._slots:
                    response = await self._http.request(method, path, timeout=timeout, **kwargs)
                if response.status_code not in RETRY_STATUS:
                    return self._check(response)
            except NETWORK_ERRORS as exc:
                if attempt == self.retries:
                    raise ServeError(0, f"cannot reach {self.url}: {exc!r}") from exc
            if attempt < self.retries:
                await asyncio.sleep(_delay(attempt, response, self.backoff_s, self.max_backoff_s))
        assert response is not None
        return self._check(response)

    async def submit(self, task: TaskLike, candidate: CandidateLike, **job: Any) -> str:
        return (await self.request("POST", "/v1/jobs", json=job_body(task, candidate, **job)))["job_id"]

    async def submit_batch(self, bodies: list[dict[str, Any]]) -> list[str]:
        return [j["job_id"] for j in (await self.request("POST", "/v1/jobs/batch", json={"jobs": bodies}))["jobs"]]

    async def status(self, job_id: str, wait_start: float = 0.0) -> dict[str, Any]:
        return await self.request("GET", f"/v1/jobs/{job_id}", wait=wait_start, params={"wait_start": wait_start})

    async def result(self, job_id: str, wait: float = 0.0) -> dict[str, Any]:
        return await self.request("GET", f"/v1/jobs/{job_id}/result", wait=wait, params={"wait": wait})

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return await self.request("DELETE", f"/v1/jobs/{job_id}")

    async def wait(self, job_id: str, queue_timeout: float | None = None, execution_timeout: float | None = None) -> EvalResult:
        q_deadline = time.monotonic() + (self.queue_timeout if queue_timeout is None else queue_timeout)
        while (info := await self.status(job_id, max(0.0, min(POLL_SLICE_S, q_deadline - time.monotonic()))))["state"] == "queued":
            if time.monotonic() >= q_deadline:
                try:
                    await self.cancel(job_id)
                except ServeError:
                    continue
                raise QueueTimeout(f"job {job_id} did not start within the queueing timeout")
        e_deadline = time.monotonic() + (self.execution_timeout if execution_timeout is None else execution_timeout)
        while info.get("state") not in ("done", "cancelled"):
            remaining = e_deadline - time.monotonic()
            if remaining <= 0:
                raise ExecutionTimeout(f"job {job_id} did not finish within the execution timeout")
            info = await self.result(job_id, wait=min(POLL_SLICE_S, remaining))
        if info.get("result") is None and info["state"] == "done" and not info.get("error"):
            info = await self.result(job_id)
        return to_result(info)

    async def evaluate(self, task: TaskLike, candidate: CandidateLike, **job: Any) -> EvalResult:
        return await self.wait(await self.submit(task, candidate, **job))

    async def evaluate_many(self, pairs: Iterable[tuple[TaskLike, CandidateLike]], batch_size: int = 64, **job: Any) -> list[EvalResult]:
        bodies = [job_body(t, c, **job) for t, c in pairs]
        ids: list[str] = []
        for start in range(0, len(bodies), batch_size):
            ids += await self.submit_batch(bodies[start:start + batch_size])
        return list(await asyncio.gather(*(self.wait(i) for i in ids)))

    async def health(self) -> dict[str, Any]:
        return await self.request("GET", "/v1/health")

    async def workers(self) -> dict[str, Any]:
        return await self.request("GET", "/v1/workers")

    async def metrics(self) -> str:
        return await self.request("GET", "/metrics")

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncServeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
