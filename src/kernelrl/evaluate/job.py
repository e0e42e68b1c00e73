"""`EvalJob`: one evaluation as the pool asks a supervisor for it, and as the supervisor hands it to its judge.

The pool writes it to the supervisor as one JSON line (`to_dict`); the supervisor decodes it with
`from_dict`, which refuses unknown and missing keys and wrong types with a `JobError` naming them. The
judge, forked from the supervisor, gets the decoded record itself.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from kernelrl.config_system import ConfigError
from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.config import EvalConfig
from kernelrl.tasks.task import Task, TaskError

JobOp = Literal["evaluate", "reference"]
_OPS = ("evaluate", "reference")
_FLAGS = ("no_reference", "compile_candidate", "reference_only")
REFERENCE_TIMING_FIELDS = ("warmup", "timing_trials", "timing_budget_s", "compile_baseline", "seed", "num_threads",
                           "device_index")


class JobError(ValueError):
    """An evaluation job on the wire is malformed; the message names the keys or values at fault."""


@dataclass(frozen=True)
class EvalJob:
    """What one supervisor job carries.

    `op`: "evaluate" (a result) or "reference" (the task's reference timing alone). `cached_reference`:
    the reference timing the pool (or the service's store) already holds; `no_reference`: the pool could
    not have one, so the job is not timed against a fresh reference either. `compile_candidate` and
    `reference_only` are the supervisor's own, for its reference children (torch.compile the candidate;
    stop after timing it)."""

    task: Task
    candidate: Candidate
    config: EvalConfig
    id: int | None = None
    op: JobOp = "evaluate"
    cached_reference: dict[str, Any] | None = None
    no_reference: bool = False
    compile_candidate: bool = False
    reference_only: bool = False

    def replace(self, **changes: Any) -> EvalJob:
        return dataclasses.replace(self, **changes)

    def reference_key(self) -> str | None:
        """What the job's reference timing depends on (task source and seed, backend, timing settings); None
        when its config turns reference-timing reuse off."""
        if not self.config.cache_reference_timing:
            return None
        settings = {name: getattr(self.config, name) for name in REFERENCE_TIMING_FIELDS}
        return json.dumps([self.task.source, self.task.seed, self.candidate.backend, settings])

    def to_dict(self) -> dict[str, Any]:
        """The JSON-serialisable wire form."""
        return {
            "id": self.id,
            "op": self.op,
            "task": self.task.to_dict(),
            "candidate": self.candidate.to_dict(),
            "config": self.config.to_dict(),
            "cached_reference": self.cached_reference,
            **{flag: getattr(self, flag) for flag in _FLAGS},
        }

    @classmethod
    def from_dict(cls, data: Any) -> EvalJob:
        """The job `data` (its wire form) describes; `JobError` for unknown or missing keys or bad values."""
        if not isinstance(data, dict):
            raise JobError(f"an evaluation job is a JSON object, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        unknown = sorted(set(data) - set(names))
        missing = [name for name in required if name not in data]
        if unknown or missing:
            parts = ([f"unknown keys: {', '.join(unknown)}"] if unknown else []) + \
                    ([f"missing keys: {', '.join(missing)}"] if missing else [])
            raise JobError("evaluation job has " + "; ".join(parts))
        return cls(
            task=_decode("task", data["task"], Task.from_dict),
            candidate=_decode("candidate", data["candidate"], lambda d: Candidate(**d)),
            config=_decode("config", data["config"], EvalConfig.from_dict),
            id=_checked("id", data.get("id"), (int, type(None))),
            op=_op(data.get("op", "evaluate")),
            cached_reference=_checked("cached_reference", data.get("cached_reference"), (dict, type(None))),
            **{flag: _checked(flag, data.get(flag, False), (bool,)) for flag in _FLAGS},
        )


def _decode(key: str, value: Any, decode: Any) -> Any:
    if not isinstance(value, dict):
        raise JobError(f"evaluation job: {key} must be an object, got {type(value).__name__}")
    try:
        return decode(value)
    except (TaskError, ConfigError, TypeError, ValueError) as exc:
        raise JobError(f"evaluation job: bad {key}: {exc}") from None


def _checked(key: str, value: Any, types: tuple[type, ...]) -> Any:
    """`value` where its type is one of `types` (a bool is no int here)."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise JobError(f"evaluation job: {key} has the wrong type ({type(value).__name__})")
    return value


def _op(value: Any) -> JobOp:
    if value not in _OPS:
        raise JobError(f"evaluation job: op must be one of {', '.join(_OPS)}, got {value!r}")
    return value  # type: ignore[no-any-return]
