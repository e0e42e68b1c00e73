"""`EvalResult`: the typed, versioned, JSON-serialisable verdict of one evaluation."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 1


class Status(StrEnum):
    OK = "ok"  # built, correct on every trial (and timed where timing is meaningful)
    COMPILED = "compiled"  # built but not run: no device for this backend here (e.g. cuda without a GPU)
    COMPILE_ERROR = "compile_error"  # Python syntax/import error, compiler error, no ModelNew
    RUNTIME_ERROR = "runtime_error"  # exception while constructing or running the candidate
    INCORRECT = "incorrect"  # ran, but outputs differ from the reference
    TIMEOUT = "timeout"  # a stage ran past its wall-clock limit
    CRASHED = "crashed"  # the process died (signal, os._exit, out of memory, output limit)
    REJECTED = "rejected"  # a static or runtime anti-hacking check failed


@dataclass
class StageReport:
    name: str  # static, build, init, correctness, timing
    status: str  # ok, failed, skipped, timeout, crashed
    duration_s: float
    message: str = ""
    cpu_s: float = 0.0  # CPU time of the evaluated process (all its threads) during the stage


@dataclass
class Correctness:
    trials: int
    passed: int
    rtol: float
    atol: float
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    failing_trial: int | None = None
    message: str = ""


@dataclass
class Timing:
    candidate_ms: float | None = None  # median
    candidate_spread_ms: float | None = None  # interquartile range
    reference_ms: float | None = None
    reference_spread_ms: float | None = None
    compiled_reference_ms: float | None = None  # torch.compile baseline, when asked for
    speedup: float | None = None  # reference / candidate
    speedup_vs_compiled: float | None = None
    trials: int = 0
    meaningful: bool = True  # False under the Triton interpreter
    method: str = ""  # e.g. "cpu monotonic clock, 2 threads" or "cuda events, L2 flushed"
    reference_cached: bool = False


@dataclass
class EvalResult:
    status: Status
    task_id: str
    backend: str
    device: str = "cpu"
    stages: list[StageReport] = field(default_factory=list)
    correctness: Correctness | None = None
    timing: Timing | None = None
    error: str = ""  # one-line summary of what went wrong
    feedback: str = ""  # compact text for a language model
    output_tail: str = ""  # what the candidate printed (truncated)
    kernel_calls: dict[str, int] = field(default_factory=dict)  # calls through kernelrl.native
    torch_ops: dict[str, int] = field(default_factory=dict)  # torch compute ops (aten name -> calls) in forward, all trials
    static_findings: list[dict[str, Any]] = field(default_factory=list)
    size_overrides: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, Any] | None = None  # time-based profiling coverage (fraction, own, fallback, overhead, samples)
    costs: dict[str, float] = field(default_factory=dict)  # seconds outside the stage table (`evaluate.costs`)
    total_s: float = 0.0
    schema_version: int = SCHEMA_VERSION

    @property
    def correct(self) -> bool:
        return self.status == Status.OK

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing and self.timing.meaningful else None

    def stage_seconds(self, name: str) -> float:
        return sum(s.duration_s for s in self.stages if s.name == name)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        return data

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        if data.get("schema_version", SCHEMA_VERSION) > SCHEMA_VERSION:
            raise ValueError(f"EvalResult schema {data['schema_version']} is newer than {SCHEMA_VERSION}")
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        if "torch_ops" not in data:  # written before the field existed: the judge's note held the counts
            data["torch_ops"] = _torch_ops_from_notes(data.get("notes") or [])
        data["status"] = Status(data["status"])
        data["stages"] = [StageReport(**s) for s in data.get("stages") or []]
        if data.get("correctness") is not None:
            data["correctness"] = Correctness(**data["correctness"])
        if data.get("timing") is not None:
            data["timing"] = Timing(**data["timing"])
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        return cls.from_dict(json.loads(text))


_LEGACY_TORCH_OPS_NOTE = re.compile(r"torch compute ops in forward: (.*)")
_LEGACY_COUNT = re.compile(r"x(\d+)$")


def _torch_ops_from_notes(notes: list[str]) -> dict[str, int]:
    """The torch-op counts of a result recorded before `EvalResult.torch_ops` existed, read back from the
    judge's note ("torch compute ops in forward: aten.addx2, ..."; an item without a count counts once)."""
    ops: dict[str, int] = {}
    for note in notes:
        m = _LEGACY_TORCH_OPS_NOTE.match(note)
        for item in m.group(1).split(",") if m else []:
            item = item.strip()
            c = _LEGACY_COUNT.search(item)
            name = item[: c.start()] if c else item
            ops[name] = ops.get(name, 0) + (int(c.group(1)) if c else 1)
    return ops
