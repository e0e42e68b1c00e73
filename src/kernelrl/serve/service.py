"""The service core, independent of HTTP: accept jobs into the store, dispatch them to the executor.

A dispatcher thread claims the highest-priority queued job whenever the executor has a free slot;
each finished job is written to the store exactly once and wakes anyone waiting on it.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.config_system import merge
from kernelrl.evaluate import Candidate, EvalConfig, EvalResult
from kernelrl.serve.executors import Executor
from kernelrl.serve.store import JobRecord, JobStore, NewJob, reference_key
from kernelrl.tasks import Task, TaskError, load_tasks
from kernelrl.tasks.metadata import check_contract, parse_module


class BadJob(ValueError):
    """A request that cannot become a job (unknown task, invalid task or config); `status` is the HTTP code."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Stats:
    """Counters and recent latencies for the metrics endpoint."""

    submitted: int = 0
    duplicates: int = 0
    completed: Counter[str] = field(default_factory=Counter)
    failed_dispatch: int = 0
    queue_latency: deque[float] = field(default_factory=lambda: deque(maxlen=10000))
    exec_latency: deque[float] = field(default_factory=lambda: deque(maxlen=10000))
    reference_hits: int = 0
    reference_misses: int = 0
    dispatch_errors: deque[str] = field(default_factory=lambda: deque(maxlen=100))


def merge_config(base: EvalConfig, overrides: dict[str, Any] | None) -> EvalConfig:
    """`base` with `overrides` applied (nested `timeouts` merged field by field)."""
    return EvalConfig.from_dict(merge(base.to_dict(), overrides or {}), "job config")


def load_task_dir(path: str | Path | None) -> dict[str, Task]:
    return {t.id: t for t in load_tasks(path)} if path else {}


class Service:
    """Store + executor + dispatcher. Thread-safe; `on_change(job_id)` is called when a job starts or ends."""

    def __init__(
        self,
        store: JobStore,
        executor: Executor,
        tasks: dict[str, Task] | None = None,
        config: EvalConfig | None = None,
        max_queue: int = 100_000,
    ) -> None:
        self.store = store
        self.executor = executor
        self.tasks = tasks or {}
        self.config = config or EvalConfig()
        self.max_queue = max_queue
        self.stats = Stats()
        self.started_at = time.time()
        self.listeners: list[Callable[[str], None]] = []
        self._cond = threading.Condition()
        self._inflight = 0
        self._pending = True  # maybe queued jobs in the store
        self._stopping = False
        self.requeued = store.requeue_running()
        self._thread = threading.Thread(target=self._dispatch_loop, name="serve-dispatcher", daemon=True)
        self._thread.start()

    # ---- accepting jobs
    def resolve(self, task: dict[str, Any] | None, task_id: str | None, candidate: dict[str, Any],
                config: dict[str, Any] | None, priority: int, key: str | None) -> NewJob:
        """Validate one request into a NewJob, or raise BadJob with a message for the client."""
        if task_id is not None:
            if task_id not in self.tasks:
                known = ", ".join(sorted(self.tasks)[:20]) or "none (start the server with --tasks DIR)"
                raise BadJob(f"unknown task id {task_id!r}; known: {known}", status=404)
            record = self.tasks[task_id]
        else:
            assert task is not None
            try:
                record = Task.from_dict(task)
                if not isinstance(record.source, str) or not record.source.strip():
                    raise TaskError("task source is empty")
                check_contract(parse_module(record.source, f"task {record.id!r}"), f"task {record.id!r}")
            except TaskError as exc:
                raise BadJob(f"invalid task: {exc}") from None
            except TypeError as exc:
                raise BadJob(f"invalid task record: {exc}") from None
        try:
            merged = merge_config(self.config, config)
            cand = Candidate(**candidate)
        except (ValueError, TypeError) as exc:
            raise BadJob(f"invalid config: {exc}") from None
        return NewJob(record.to_dict(), cand.to_dict(), merged.to_dict(), priority, key)

    def accept(self, jobs: list[NewJob]) -> list[tuple[str, str, bool]]:  # raises store.QueueFull
        """Store jobs (atomically) and wake the dispatcher; QueueFull when the queue is at its limit."""
        out = self.store.add_many(jobs, max_queued=self.max_queue)
        fresh = sum(1 for _, _, dup in out if not dup)
        self.stats.submitted += fresh
        self.stats.duplicates += len(out) - fresh
        if fresh:
            with self._cond:
                self._pending = True
                self._cond.notify_all()
        return out

    def cancel(self, job_id: str) -> bool:
        ok = self.store.cancel(job_id)
        if ok:
            self._notify(job_id)
        return ok

    # ---- dispatching
    def _dispatch_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (self._inflight >= self.executor.capacity or not self._pending):
                    if not self._cond.wait(timeout=1.0) and self._inflight < self.executor.capacity:
                        self._pending = True  # a periodic look at the store
                if self._stopping:
                    return
            try:
                job = self.store.claim_next()
            except Exception as exc:  # e.g. a locked or full disk: keep the dispatcher alive, try again
                self.stats.dispatch_errors.append(repr(exc))
                time.sleep(0.5)
                continue
            if job is None:
                with self._cond:
                    self._pending = False
                continue
            with self._cond:
                self._inflight += 1
            self._start(job)

    def _start(self, job: JobRecord) -> None:
        if job.queue_s is not None:
            self.stats.queue_latency.append(job.queue_s)
        self._notify(job.id)
        try:
            task, candidate = Task.from_dict(job.task), Candidate(**job.candidate)
            config = EvalConfig.from_dict(job.config)
            cache = self._cache_lookup(task, candidate, config)
            future = self.executor.submit(task, candidate, config, cache[2] if cache else None)
        except Exception as exc:  # never lose a job: a dispatch failure is its result
            self.stats.failed_dispatch += 1
            self._complete(job, None, f"dispatch failed: {exc!r}")
            return
        started = time.monotonic()
        future.add_done_callback(lambda f: self._on_done(job, f, started, cache))

    def _cache_lookup(self, task: Task, candidate: Candidate, config: EvalConfig) -> tuple[str, str, dict | None] | None:
        if not (config.measure_timing and config.cache_reference_timing):
            return None
        key, settings = reference_key(task.source_hash, self.executor.device, candidate.backend, config.to_dict())
        cached = self.store.reference_timing(key)
        if cached:
            self.stats.reference_hits += 1
        else:
            self.stats.reference_misses += 1
        return key, settings, cached

    def _on_done(self, job: JobRecord, future: cf.Future[EvalResult], started: float, cache: tuple | None) -> None:
        if self._stopping:
            return
        self.stats.exec_latency.append(time.monotonic() - started)
        try:
            result = future.result()
        except BaseException as exc:
            self._complete(job, None, f"the executor failed: {exc!r}")
            return
        timing = result.timing
        if cache and timing and timing.reference_ms is not None and not timing.reference_cached:
            key, settings, _ = cache
            try:  # best effort: the cache must never cost a job its result
                self.store.put_reference_timing(
                    key, Task.from_dict(job.task).source_hash, self.executor.device, settings,
                    {"reference_ms": timing.reference_ms, "reference_spread_ms": timing.reference_spread_ms,
                     "compiled_reference_ms": timing.compiled_reference_ms},
                )
            except Exception as exc:
                self.stats.dispatch_errors.append(f"reference cache: {exc!r}")
        self._complete(job, result.to_dict(), result.error if result.status == "crashed" else "")

    def _complete(self, job: JobRecord, result: dict[str, Any] | None, error: str) -> None:
        if self._stopping:  # the store may be closed; the job is re-queued on the next start
            return
        try:
            if self.store.finish(job.id, result, error):
                self.stats.completed[result["status"] if result else "failed"] += 1
        except Exception as exc:  # not written: the job stays running and is re-queued on the next start
            self.stats.dispatch_errors.append(f"store: {exc!r}")
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()
        self._notify(job.id)

    def _notify(self, job_id: str) -> None:
        for listener in list(self.listeners):
            try:
                listener(job_id)
            except Exception:
                pass

    # ---- reporting and shutdown
    def health(self) -> dict[str, Any]:
        counts = self.store.counts()
        alive = self._thread.is_alive()
        return {
            "status": "ok" if alive else "degraded",
            "executor": self.executor.name,
            "queued": counts["queued"],
            "running": counts["running"],
            "uptime_s": time.time() - self.started_at,
        }

    def close(self, close_executor: bool = True) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=10)
        if close_executor:
            self.executor.close()
        self.store.close()
