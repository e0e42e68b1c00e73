"""Pydantic models of the service's wire format (requests and responses)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kernelrl.evaluate.candidate import BACKENDS

JobState = Literal["queued", "running", "done", "cancelled"]
TERMINAL_STATES = ("done", "cancelled")


class CandidateIn(BaseModel):
    """A candidate solution: Python source defining `ModelNew`, and the backend it targets."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1)
    backend: str = "cpu"
    id: str = ""

    @model_validator(mode="after")
    def _known_backend(self) -> CandidateIn:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; use one of {', '.join(BACKENDS)}")
        return self


class JobIn(BaseModel):
    """One evaluation request: the task inline (a Task record) or by id, plus the candidate."""

    model_config = ConfigDict(extra="forbid")

    task: dict[str, Any] | None = None
    task_id: str | None = None
    candidate: CandidateIn
    config: dict[str, Any] | None = None  # EvalConfig overrides on top of the server's defaults
    priority: int = Field(default=0, ge=-1000, le=1000)  # higher runs first
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _one_task(self) -> JobIn:
        if (self.task is None) == (self.task_id is None):
            raise ValueError("give exactly one of `task` (an inline Task record) or `task_id`")
        return self


class BatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[JobIn] = Field(min_length=1)


class Submitted(BaseModel):
    job_id: str
    state: JobState
    duplicate: bool = False  # True when an idempotency key matched an earlier job


class BatchSubmitted(BaseModel):
    jobs: list[Submitted]


class JobOut(BaseModel):
    """A job's status; `result` (an EvalResult dict) once it is done."""

    job_id: str
    state: JobState
    priority: int
    task_id: str
    backend: str
    attempts: int
    created: float
    started: float | None = None
    finished: float | None = None
    queue_s: float | None = None  # accepted -> started (last start)
    error: str = ""
    result: dict[str, Any] | None = None


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    executor: str
    queued: int
    running: int
    uptime_s: float


class ErrorOut(BaseModel):
    error: str
    detail: Any = None
