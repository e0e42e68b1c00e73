"""The FastAPI application: submit one or a batch, status, result (long-poll), cancel, health, workers, metrics."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException

from kernelrl.serve.metrics import render_metrics
from kernelrl.serve.middleware import GuardMiddleware
from kernelrl.serve.models import TERMINAL_STATES, BatchIn, BatchSubmitted, Health, JobIn, JobOut, Submitted
from kernelrl.serve.service import BadJob, Service
from kernelrl.serve.store import IdempotencyConflict, JobRecord, QueueFull

MAX_WAIT_S = 300.0


class Waiters:
    """Wakes long-polling requests when a job starts or finishes (called from service threads)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, set[asyncio.Event]] = {}
        self._lock = threading.Lock()

    def notify(self, job_id: str) -> None:
        with self._lock:
            waiting = job_id in self._events
        if waiting and self.loop is not None:
            self.loop.call_soon_threadsafe(self._fire, job_id)

    def _fire(self, job_id: str) -> None:
        with self._lock:
            events = list(self._events.get(job_id, ()))
        for event in events:
            event.set()

    def add(self, job_id: str) -> asyncio.Event:
        event = asyncio.Event()
        with self._lock:
            self._events.setdefault(job_id, set()).add(event)
        return event

    def remove(self, job_id: str, event: asyncio.Event) -> None:
        with self._lock:
            events = self._events.get(job_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._events[job_id]


def job_out(job: JobRecord, with_result: bool) -> JobOut:
    return JobOut(
        job_id=job.id, state=job.state, priority=job.priority, task_id=job.task_id, backend=job.backend,  # type: ignore[arg-type]
        attempts=job.attempts, created=job.created, started=job.started, finished=job.finished,
        queue_s=job.queue_s, error=job.error, result=job.result if with_result else None,
    )


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _validation_message(exc: RequestValidationError) -> tuple[int, str, list[dict[str, Any]]]:
    errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": e.get("type")} for e in exc.errors()]
    bad_json = [e for e in errors if e["type"] == "json_invalid"]
    if bad_json:
        ctx = next((e.get("ctx", {}) for e in exc.errors() if e.get("type") == "json_invalid"), {})
        where = bad_json[0]["loc"][-1] if len(bad_json[0]["loc"]) > 1 else "?"
        return 400, f"malformed JSON in the request body: {ctx.get('error', 'cannot parse it')} (at character {where})", errors
    parts = [f"{'.'.join(e['loc'][1:]) or 'body'}: {e['msg'].removeprefix('Value error, ')}" for e in errors[:5]]
    return 422, "invalid request: " + "; ".join(parts), errors


def create_app(service: Service, token: str | None = None, max_body: int = 8 * 2**20) -> FastAPI:
    """The HTTP app over a running `Service`; the app closes the service on shutdown."""
    waiters = Waiters()
    service.listeners.append(waiters.notify)
    responses: Counter[int] = Counter()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        waiters.loop = asyncio.get_running_loop()
        try:
            yield
        finally:
            await asyncio.to_thread(service.close)

    app = FastAPI(title="kernelrl serve", version="1", lifespan=lifespan)
    app.add_middleware(GuardMiddleware, max_body=max_body, token=token, responses=responses)
    app.state.service = service

    @app.exception_handler(RequestValidationError)
    async def on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        status, message, errors = _validation_message(exc)
        return _error(status, message, detail=errors)

    @app.exception_handler(HTTPException)
    async def on_http(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def on_crash(_: Request, exc: Exception) -> JSONResponse:
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    def _submit(jobs: list[JobIn]) -> list[Submitted] | JSONResponse:
        new = []
        for index, job in enumerate(jobs):
            try:
                new.append(service.resolve(job.task, job.task_id, job.candidate.model_dump(), job.config,
                                           job.priority, job.idempotency_key))
            except BadJob as exc:
                where = f"jobs[{index}]: " if len(jobs) > 1 else ""
                return _error(exc.status, where + str(exc))
        try:
            accepted = service.accept(new)
        except QueueFull as exc:
            return JSONResponse({"error": str(exc)}, status_code=429, headers={"Retry-After": "1"})
        except IdempotencyConflict as exc:
            return _error(409, str(exc))
        return [Submitted(job_id=i, state=s, duplicate=d) for i, s, d in accepted]  # type: ignore[arg-type]

    @app.post("/v1/jobs", response_model=Submitted, status_code=201)
    def submit_one(job: JobIn) -> Any:
        out = _submit([job])
        if isinstance(out, JSONResponse):
            return out
        return JSONResponse(out[0].model_dump(), status_code=200 if out[0].duplicate else 201)

    @app.post("/v1/jobs/batch", response_model=BatchSubmitted, status_code=201)
    def submit_batch(batch: BatchIn) -> Any:
        out = _submit(batch.jobs)
        return out if isinstance(out, JSONResponse) else BatchSubmitted(jobs=out)

    def _get(job_id: str) -> JobRecord:
        job = service.store.get(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id!r}")
        return job

    async def _wait(job_id: str, done: Any, wait: float) -> JobRecord:
        deadline = asyncio.get_running_loop().time() + min(max(wait, 0.0), MAX_WAIT_S)
        while True:
            event = waiters.add(job_id)
            try:
                job = _get(job_id)
                remaining = deadline - asyncio.get_running_loop().time()
                if done(job) or remaining <= 0:
                    return job
                try:
                    await asyncio.wait_for(event.wait(), timeout=min(remaining, 1.0))
                except TimeoutError:
                    pass
            finally:
                waiters.remove(job_id, event)

    @app.get("/v1/jobs/{job_id}", response_model=JobOut)
    async def status(job_id: str, wait_start: float = 0.0) -> JobOut:
        """A job's state; with `wait_start=S`, waits up to S seconds for it to leave the queue."""
        job = await _wait(job_id, lambda j: j.state != "queued", wait_start)
        return job_out(job, with_result=False)

    @app.get("/v1/jobs/{job_id}/result", response_model=JobOut)
    async def result(job_id: str, wait: float = 0.0) -> Any:
        """The job with its result (200), or its state (202) if it has not finished within `wait` seconds."""
        job = await _wait(job_id, lambda j: j.state in TERMINAL_STATES, wait)
        out = job_out(job, with_result=True)
        return JSONResponse(out.model_dump(), status_code=200 if job.state in TERMINAL_STATES else 202)

    @app.delete("/v1/jobs/{job_id}", response_model=JobOut)
    def cancel(job_id: str) -> Any:
        job = _get(job_id)
        if not service.cancel(job_id):
            return _error(409, f"job {job_id!r} is {service.store.get(job_id).state}; only queued jobs can be cancelled")  # type: ignore[union-attr]
        return job_out(_get(job.id), with_result=False)

    @app.get("/v1/health", response_model=Health)
    def health() -> Health:
        return Health(**service.health())

    @app.get("/v1/workers")
    def workers() -> dict[str, Any]:
        return service.executor.workers()

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(render_metrics(service, responses), media_type="text/plain; version=0.0.4")

    return app
