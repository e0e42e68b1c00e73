"""A pool of warm evaluation workers: `evaluate` and `evaluate_many` from a training loop or the CLI.

Each worker is a supervisor process (torch imported once) that forks a disposable child per
evaluation. A worker that dies is replaced and its job run once more; no job is dropped.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import itertools
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import kernelrl
from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.config import COMPILE_TIMEOUT_S, EvalConfig, default_workers
from kernelrl.evaluate.costs import cost_breakdown
from kernelrl.evaluate.job import EvalJob
from kernelrl.evaluate.messages import (
    MessageReader,
    ProtocolError,
    write_message,
)
from kernelrl.evaluate.result import EvalResult, StageReport, Status
from kernelrl.evaluate.sandbox import (
    bwrap_available,
    bwrap_command,
    describe_missing,
    prepare_cache,
    sandbox_env,
)
from kernelrl.native.build import cache_dir
from kernelrl.tasks.task import Task

log = logging.getLogger(__name__)
# Queue priorities: evaluations and the references they wait for first; a reference prefetched ahead (for a task
# whose candidates are not being generated yet) only when a worker has nothing else; the workers' stop last.
NOW, AHEAD, STOP = 0, 1, 2
STARTUP_TIMEOUT_S = 120.0
SUPERVISOR_MARGIN_S = 30.0  # beyond the sum of stage limits before a worker itself is presumed hung


class WorkerDied(RuntimeError):
    pass


class Worker:
    """One supervisor process and its JSON-lines channel."""

    def __init__(self, env: dict[str, str] | None = None, sandbox: bool = False, slot: int = 0) -> None:
        self.env = {**(env or {}), "KERNELRL_WORKER_SLOT": str(slot)}
        self.sandbox = sandbox
        self.process: subprocess.Popen[bytes] | None = None
        self.reader: MessageReader | None = None
        self.start()

    def start(self) -> None:
        command = [sys.executable, "-m", "kernelrl.evaluate.supervisor"]
        # Workers import the same kernelrl as this process (a checkout may shadow an installed copy).
        package_root = str(Path(kernelrl.__file__).resolve().parents[1])
        paths = [package_root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        python_path = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
        if self.sandbox:
            cache = str(cache_dir())
            prepare_cache(cache)
            env = {**sandbox_env(cache), **python_path, **self.env, "PYTHONUNBUFFERED": "1"}
            command = [*bwrap_command(cache), *command]
        else:
            env = {**os.environ, **python_path, **self.env, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        self.reader = MessageReader(self.process.stdout.fileno())
        try:
            ready = self.reader.read(time.monotonic() + STARTUP_TIMEOUT_S)
        except (TimeoutError, ProtocolError) as exc:
            self.stop()
            raise WorkerDied(f"evaluation worker did not start: {exc!r}") from None
        if not ready or ready.get("event") != "ready":
            self.stop()
            raise WorkerDied("evaluation worker exited during start-up")

    def run(self, job: EvalJob, deadline: float, event: str = "result") -> Any:
        if self.process is None:  # an earlier restart failed: try again rather than wedge this slot
            self.start()
        assert self.process is not None and self.process.stdin is not None and self.reader is not None
        try:
            write_message(self.process.stdin.fileno(), job.to_dict())
            reply = self.reader.read(deadline)
        except (BrokenPipeError, OSError, TimeoutError, ProtocolError) as exc:
            raise WorkerDied(f"worker failed: {exc!r}") from None
        if reply is None:
            raise WorkerDied(f"worker exited (code {self.process.poll()})")
        if reply.get("event") != event:
            raise WorkerDied("worker error:\n" + str(reply.get("traceback", reply)))
        return reply[event]

    def reference(self, job: EvalJob, deadline: float) -> dict[str, Any] | None:
        """The task's reference timing for `job`, measured by this worker's supervisor in a child that runs
        no candidate code (None: timing is off or not meaningful there, or the reference does not run)."""
        reply = self.run(job.replace(op="reference"), deadline, event="reference")
        return reply if isinstance(reply, dict) else None

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream:
                stream.close()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _job_deadline(config: EvalConfig) -> float:
    t = config.timeouts
    return time.monotonic() + 2 * t.build + t.init + t.correctness + t.timing + SUPERVISOR_MARGIN_S


class EvalPool:
    """Warm workers that evaluate (task, candidate) pairs concurrently; safe to share across threads.

    >>> with EvalPool(workers=2) as pool:
    ...     result = pool.evaluate(task, candidate)
    """

    def __init__(
        self,
        workers: int | None = None,
        config: EvalConfig | None = None,
        env: dict[str, str] | None = None,
        sandbox: str = "auto",
    ) -> None:
        """`sandbox`: "auto" (bubblewrap when it works here, else a logged warning), "bwrap" (required) or "none"."""
        if sandbox not in ("auto", "bwrap", "none"):
            raise ValueError(f"sandbox must be auto, bwrap or none, got {sandbox!r}")
        self.config = config or EvalConfig()
        self.size = workers or default_workers()
        self._env = env or {}
        self.sandboxed = sandbox != "none" and bwrap_available()
        if sandbox == "bwrap" and not self.sandboxed:
            raise RuntimeError(describe_missing())
        if sandbox == "auto" and not self.sandboxed:
            log.warning(describe_missing())
        if not self.sandboxed or os.geteuid() != 0:
            log.warning(
                "evaluations run with this process's uid (no bubblewrap, or not root): native builds still go "
                "through the supervisor, but candidate code could write the shared build cache %s itself",
                cache_dir(),
            )
        self._jobs: queue.PriorityQueue[tuple[int, int, tuple[EvalJob, cf.Future[Any]] | None]] = queue.PriorityQueue()
        self._ids = itertools.count()
        self._order = itertools.count()  # FIFO within a priority
        self._closed = False
        self.restarts = 0
        # reference timings shared by the workers (None: none can be had), each measured once per key
        self._references: dict[str, dict[str, Any] | None] = {}
        self._references_lock = threading.Lock()
        self._measuring: dict[str, threading.Lock] = {}
        self._ahead: set[str] = set()  # keys queued ahead (AHEAD), measured or not
        self.cost_log: list[dict[str, float]] = []  # one `cost_breakdown` per evaluation run by a worker
        self.reference_log: list[float] = []  # seconds of each reference timing measured, prefetched ones included
        self._threads = [
            threading.Thread(target=self._serve, args=(i,), daemon=True, name=f"eval-worker-{i}") for i in range(self.size)
        ]
        self._started = threading.Barrier(self.size + 1)
        self._start_errors: list[BaseException] = []
        for thread in self._threads:
            thread.start()
        self._started.wait()
        if self._start_errors:
            self.close()
            raise self._start_errors[0]

    def _serve(self, slot: int) -> None:
        try:
            worker = Worker(self._env, self.sandboxed, slot)
        except BaseException as exc:
            self._start_errors.append(exc)
            self._started.wait()
            return
        self._started.wait()
        try:
            while True:
                priority, _, item = self._jobs.get()
                if item is None:
                    return
                job, future = item
                if priority == AHEAD and self._closed:
                    future.cancel()  # nobody waits for a reference the pool will not use
                if not future.set_running_or_notify_cancel():
                    continue
                if job.op == "reference":
                    key = job.reference_key()
                    future.set_result(self._reference(worker, key, job)[0] if key else None)
                else:
                    future.set_result(self._run_with_retry(worker, job))
        finally:
            worker.stop()

    def _reference(self, worker: Worker, key: str, job: EvalJob) -> tuple[dict[str, Any] | None, float]:
        """The reference timing for `key` and the seconds spent measuring it now (0: it was at hand): once per key for the whole
        pool (a worker that needs a key another is measuring waits for it), by a supervisor's clean child,
        before any candidate of the task runs, whatever that candidate's verdict turns out to be."""
        with self._references_lock:
            if key in self._references:
                return self._references[key], 0.0
            lock = self._measuring.setdefault(key, threading.Lock())
        with lock:
            with self._references_lock:
                if key in self._references:
                    return self._references[key], 0.0
            config = job.config
            extra = COMPILE_TIMEOUT_S if config.compile_baseline else 0.0
            started = time.perf_counter()
            try:
                entry = worker.reference(job, _job_deadline(config) + extra)
            except WorkerDied:
                worker.restart()
                return None, 0.0  # the job's own supervisor times it then
            seconds = time.perf_counter() - started
            with self._references_lock:
                self._references[key] = entry
                self.reference_log.append(seconds)
            return entry, seconds

    def _run_with_retry(self, worker: Worker, job: EvalJob) -> EvalResult:
        config = job.config
        key = job.reference_key() if config.measure_timing else None
        fresh = 0.0
        if key and job.cached_reference is None:
            entry, fresh = self._reference(worker, key, job)
            job = job.replace(cached_reference=entry) if entry else job.replace(no_reference=True)
        reason = ""
        for _attempt in range(2):
            try:
                started = time.perf_counter()
                result = EvalResult.from_dict(worker.run(job, _job_deadline(config)))
                self.cost_log.append(cost_breakdown(result, time.perf_counter() - started, fresh))
                if fresh and result.timing is not None and result.timing.reference_cached:
                    result.timing.reference_cached = False  # measured for this job, in a process of its own
                    result.notes.append("reference timed in a separate process that ran no candidate code")
                return result
            except WorkerDied as exc:
                reason = str(exc)
                self.restarts += 1
                try:
                    worker.restart()
                except WorkerDied as start_error:
                    reason += f"; restart failed: {start_error}"
                    break
        return EvalResult(
            status=Status.CRASHED,
            task_id=job.task.id,
            backend=job.candidate.backend,
            stages=[StageReport(name="worker", status="crashed", duration_s=0.0, message=reason)],
            error=f"the evaluation worker died twice on this job: {reason}",
            feedback=f"status: crashed\nthe evaluation worker died twice on this job: {reason}",
        )

    def submit(
        self,
        task: Task,
        candidate: Candidate,
        config: EvalConfig | None = None,
        cached_reference: dict[str, Any] | None = None,
    ) -> cf.Future[EvalResult]:
        """Queue one evaluation; `cached_reference` (reference timing from an outside cache) skips timing the reference."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        job = EvalJob(task, candidate, config or self.config, id=next(self._ids),
                      cached_reference=cached_reference or None)
        future: cf.Future[EvalResult] = cf.Future()
        self._jobs.put((NOW, next(self._order), (job, future)))
        return future

    def prefetch(self, task: Task, backend: str = "cpu", config: EvalConfig | None = None, *,
                 ahead: bool = False) -> cf.Future[Any] | None:
        """Queue the measurement of `task`'s reference timing (trusted material, once per task and settings)
        before its candidates, e.g. while a policy still generates them; None where it is at hand, being
        measured, already queued ahead (`ahead`), or not wanted (timing off, the cache off).

        `ahead`: for a task whose candidates come later (the next RL step's): it waits until no evaluation
        and no other reference is queued, so it fills a worker's idle time instead of delaying this step's
        verdicts; a later prefetch without `ahead` still puts it first. Cancelled at `close`."""
        config = config or self.config
        job = EvalJob(task, Candidate("", backend), config, id=next(self._ids), op="reference")
        key = job.reference_key() if config.measure_timing else None
        with self._references_lock:
            if key is None or key in self._references or key in self._measuring or self._closed:
                return None
            if ahead:
                if key in self._ahead:
                    return None
                self._ahead.add(key)
        future: cf.Future[Any] = cf.Future()
        self._jobs.put((AHEAD if ahead else NOW, next(self._order), (job, future)))
        return future

    def evaluate(self, task: Task, candidate: Candidate, config: EvalConfig | None = None) -> EvalResult:
        return self.submit(task, candidate, config).result()

    def evaluate_many(
        self, pairs: Iterable[tuple[Task, Candidate]], config: EvalConfig | None = None
    ) -> Iterator[tuple[int, EvalResult]]:
        """Yields `(index, result)` in completion order, so a caller can act on each as it lands."""
        futures = {self.submit(task, candidate, config): index for index, (task, candidate) in enumerate(pairs)}
        for future in cf.as_completed(futures):
            yield futures[future], future.result()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._jobs.put((STOP, next(self._order), None))
        for thread in self._threads:
            thread.join(timeout=30)

    def __enter__(self) -> EvalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_DEFAULT_POOL: EvalPool | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> EvalPool:
    """A process-wide pool, created on first use and closed at exit."""
    global _DEFAULT_POOL
    with _DEFAULT_LOCK:
        if _DEFAULT_POOL is None:
            _DEFAULT_POOL = EvalPool()
            atexit.register(_DEFAULT_POOL.close)
        return _DEFAULT_POOL


def evaluate(task: Task, candidate: Candidate, config: EvalConfig | None = None) -> EvalResult:
    """Evaluate one candidate in the default pool (candidate code never runs in this process)."""
    return default_pool().evaluate(task, candidate, config)


def evaluate_many(
    pairs: Iterable[tuple[Task, Candidate]], config: EvalConfig | None = None
) -> Iterator[tuple[int, EvalResult]]:
    """Evaluate many pairs in the default pool, yielding `(index, result)` as each completes."""
    return default_pool().evaluate_many(pairs, config)
