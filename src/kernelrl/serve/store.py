"""Durable job store on SQLite (WAL): jobs survive a server restart, and a reference-timing cache.

A job moves queued -> running -> done (or queued -> cancelled). On start the server re-queues jobs
that were running when it stopped, so every accepted job ends with exactly one result.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    idempotency_key TEXT UNIQUE,
    request_hash TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    task_id TEXT NOT NULL,
    backend TEXT NOT NULL,
    task_json TEXT NOT NULL,
    candidate_json TEXT NOT NULL,
    config_json TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    completions INTEGER NOT NULL DEFAULT 0,
    result_json TEXT,
    error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (state, priority DESC, seq);
CREATE TABLE IF NOT EXISTS reference_timing (
    key TEXT PRIMARY KEY,
    task_hash TEXT NOT NULL,
    device TEXT NOT NULL,
    settings TEXT NOT NULL,
    timing_json TEXT NOT NULL,
    created REAL NOT NULL
);
"""

# EvalConfig fields that change a reference timing (the same ones the supervisor's own cache uses).
TIMING_SETTINGS = ("warmup", "timing_trials", "timing_budget_s", "compile_baseline", "seed", "num_threads", "device_index")


class IdempotencyConflict(ValueError):
    """An idempotency key was reused with a different request."""


class QueueFull(RuntimeError):
    """Accepting the jobs would take the queue past its limit."""


@dataclass
class NewJob:
    task: dict[str, Any]
    candidate: dict[str, Any]
    config: dict[str, Any]
    priority: int = 0
    idempotency_key: str | None = None

    def request_hash(self) -> str:
        blob = json.dumps([self.task, self.candidate, self.config, self.priority], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class JobRecord:
    id: str
    state: str
    priority: int
    task_id: str
    backend: str
    task: dict[str, Any]
    candidate: dict[str, Any]
    config: dict[str, Any]
    created: float
    started: float | None
    finished: float | None
    attempts: int
    completions: int
    result: dict[str, Any] | None
    error: str

    @property
    def queue_s(self) -> float | None:
        return None if self.started is None else max(0.0, self.started - self.created)


def reference_key(task_hash: str, device: str, backend: str, config: dict[str, Any]) -> tuple[str, str]:
    """(cache key, settings JSON) for a reference timing of a task on a device under these settings."""
    settings = json.dumps({"backend": backend, **{k: config.get(k) for k in TIMING_SETTINGS}}, sort_keys=True)
    key = hashlib.sha256(f"{task_hash}|{device}|{settings}".encode()).hexdigest()
    return key, settings


class JobStore:
    """Thread-safe SQLite store; one connection guarded by a lock (each call is one short transaction)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses nothing committed
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, args)

    def add_many(self, jobs: list[NewJob], max_queued: int | None = None) -> list[tuple[str, str, bool]]:
        """Insert jobs atomically; returns (id, state, duplicate) per job.

        Raises IdempotencyConflict, or QueueFull when the new jobs would take the queue past `max_queued`.
        """
        out: list[tuple[str, str, bool]] = []
        now = time.time()
        with self._lock:
            self._tx("BEGIN IMMEDIATE")
            try:
                queued = self._tx("SELECT COUNT(*) FROM jobs WHERE state = 'queued'").fetchone()[0]
                for job in jobs:
                    digest = job.request_hash()
                    if job.idempotency_key is not None:
                        row = self._tx(
                            "SELECT id, state, request_hash FROM jobs WHERE idempotency_key = ?", (job.idempotency_key,)
                        ).fetchone()
                        if row is not None:
                            if row["request_hash"] != digest:
                                raise IdempotencyConflict(
                                    f"idempotency key {job.idempotency_key!r} was already used for a different request"
                                )
                            out.append((row["id"], row["state"], True))
                            continue
                    job_id = uuid.uuid4().hex
                    self._tx(
                        "INSERT INTO jobs (id, idempotency_key, request_hash, priority, state, task_id, backend,"
                        " task_json, candidate_json, config_json, created) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (
                            job_id, job.idempotency_key, digest, job.priority, "queued", job.task["id"],
                            job.candidate["backend"], json.dumps(job.task), json.dumps(job.candidate),
                            json.dumps(job.config), now,
                        ),
                    )
                    out.append((job_id, "queued", False))
                fresh = sum(1 for _, _, duplicate in out if not duplicate)
                if max_queued is not None and fresh and queued + fresh > max_queued:  # duplicates always answer
                    raise QueueFull(f"the queue holds {queued} jobs (limit {max_queued}); retry later")
                self._tx("COMMIT")
            except BaseException:
                self._tx("ROLLBACK")
                raise
        return out

    def claim_next(self) -> JobRecord | None:
        """The highest-priority, oldest queued job, marked running (attempts + 1)."""
        with self._lock:
            self._tx("BEGIN IMMEDIATE")
            try:
                row = self._tx(
                    "SELECT id FROM jobs WHERE state = 'queued' ORDER BY priority DESC, seq LIMIT 1"
                ).fetchone()
                if row is None:
                    self._tx("COMMIT")
                    return None
                self._tx(
                    "UPDATE jobs SET state = 'running', started = ?, attempts = attempts + 1 WHERE id = ?",
                    (time.time(), row["id"]),
                )
                record = self._get(row["id"])
                self._tx("COMMIT")
            except BaseException:
                self._tx("ROLLBACK")
                raise
        return record

    def finish(self, job_id: str, result: dict[str, Any] | None, error: str = "") -> bool:
        """Record the one result of a running job; False if it was not running (nothing written)."""
        with self._lock:
            cursor = self._tx(
                "UPDATE jobs SET state = 'done', finished = ?, result_json = ?, error = ?,"
                " completions = completions + 1 WHERE id = ? AND state = 'running'",
                (time.time(), json.dumps(result) if result is not None else None, error, job_id),
            )
            return cursor.rowcount == 1

    def cancel(self, job_id: str) -> bool:
        """Cancel a job that has not started; False otherwise."""
        with self._lock:
            cursor = self._tx(
                "UPDATE jobs SET state = 'cancelled', finished = ? WHERE id = ? AND state = 'queued'",
                (time.time(), job_id),
            )
            return cursor.rowcount == 1

    def requeue_running(self) -> int:
        """On start: jobs that were running when the server stopped go back to the queue."""
        with self._lock:
            return self._tx("UPDATE jobs SET state = 'queued' WHERE state = 'running'").rowcount

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            return self._get(job_id)

    def _get(self, job_id: str) -> JobRecord | None:
        row = self._tx("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        return JobRecord(
            id=row["id"], state=row["state"], priority=row["priority"], task_id=row["task_id"],
            backend=row["backend"], task=json.loads(row["task_json"]), candidate=json.loads(row["candidate_json"]),
            config=json.loads(row["config_json"]), created=row["created"], started=row["started"],
            finished=row["finished"], attempts=row["attempts"], completions=row["completions"],
            result=json.loads(row["result_json"]) if row["result_json"] else None, error=row["error"],
        )

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._tx("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state").fetchall()
        counts = {"queued": 0, "running": 0, "done": 0, "cancelled": 0}
        counts.update({r["state"]: r["n"] for r in rows})
        return counts

    def all_jobs(self) -> list[dict[str, Any]]:
        """Every job's id, state, attempts and completions (for audits and tests)."""
        with self._lock:
            rows = self._tx("SELECT id, idempotency_key, state, attempts, completions FROM jobs ORDER BY seq").fetchall()
        return [dict(r) for r in rows]

    def reference_timing(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._tx("SELECT timing_json FROM reference_timing WHERE key = ?", (key,)).fetchone()
        return json.loads(row["timing_json"]) if row else None

    def put_reference_timing(self, key: str, task_hash: str, device: str, settings: str, timing: dict[str, Any]) -> None:
        with self._lock:
            self._tx(
                "INSERT OR REPLACE INTO reference_timing (key, task_hash, device, settings, timing_json, created)"
                " VALUES (?,?,?,?,?,?)",
                (key, task_hash, device, settings, json.dumps(timing), time.time()),
            )

    def reference_timing_count(self) -> int:
        with self._lock:
            return self._tx("SELECT COUNT(*) FROM reference_timing").fetchone()[0]
