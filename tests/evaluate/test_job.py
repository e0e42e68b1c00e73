"""`EvalJob`, the record the pool sends a supervisor: its wire form round trips, and a malformed one is
refused with the key named, by the record and by a real supervisor process."""

from __future__ import annotations

import json
import time

import pytest

from kernelrl.evaluate import Candidate, EvalConfig, StageTimeouts
from kernelrl.evaluate.job import EvalJob, JobError
from kernelrl.evaluate.messages import write_message
from kernelrl.evaluate.pool import Worker
from kernelrl.tasks import Task
from tests.evaluate import candidates as C

TASK = Task(id="test/scaled_relu", source=C.RELU_TASK, size_overrides={"N": (1024, 64)})
CONFIG = EvalConfig(timing_trials=5, timeouts=StageTimeouts(build=30))


def job(**changes: object) -> EvalJob:
    base = EvalJob(TASK, Candidate(C.GOOD, backend="cpu", id="good"), CONFIG, id=7)
    return base.replace(**changes)


@pytest.mark.parametrize("changes", [{}, {"op": "reference"}, {"cached_reference": {"reference_ms": 1.5}},
                                     {"no_reference": True, "compile_candidate": True, "reference_only": True}])
def test_round_trip_through_json(changes: dict[str, object]) -> None:
    original = job(**changes)
    decoded = EvalJob.from_dict(json.loads(json.dumps(original.to_dict())))
    assert decoded == original
    assert decoded.task.size_overrides == {"N": (1024, 64)}  # tuples again, as the loader made them


def test_optional_keys_default() -> None:
    wire = {"task": TASK.to_dict(), "candidate": {"source": C.GOOD}, "config": {}}
    decoded = EvalJob.from_dict(wire)
    assert (decoded.op, decoded.id, decoded.cached_reference, decoded.no_reference) == ("evaluate", None, None, False)
    assert decoded.config == EvalConfig()


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda d: d.update(cached_refrence={}), "unknown keys: cached_refrence"),
    (lambda d: d.pop("config"), "missing keys: config"),
    (lambda d: d.update(op="time"), "op must be one of evaluate, reference"),
    (lambda d: d.update(reference_only="yes"), "reference_only has the wrong type (str)"),
    (lambda d: d.update(id=True), "id has the wrong type (bool)"),
    (lambda d: d["task"].update(sorce="x"), "bad task: task record has unknown fields: sorce"),
    (lambda d: d["candidate"].update(backend="fortran"), "bad candidate: unknown backend 'fortran'"),
    (lambda d: d["config"].update(timing_trials=0), "bad config"),
    (lambda d: d.update(task="scaled_relu"), "task must be an object"),
])
def test_malformed_jobs_name_the_fault(mutate, needle: str) -> None:
    wire = job().to_dict()
    mutate(wire)
    with pytest.raises(JobError) as excinfo:
        EvalJob.from_dict(wire)
    assert needle in str(excinfo.value)


def test_reference_key_follows_timing_settings_only() -> None:
    key = job().reference_key()
    assert key is not None and key == job(id=8, candidate=Candidate("other", id="x")).reference_key()
    assert key != job(config=CONFIG.replace(timing_trials=6)).reference_key()
    assert job(config=CONFIG.replace(cache_reference_timing=False)).reference_key() is None


def test_a_supervisor_refuses_a_malformed_job_and_serves_the_next() -> None:
    worker = Worker()
    try:
        assert worker.process is not None and worker.process.stdin is not None and worker.reader is not None
        write_message(worker.process.stdin.fileno(), {**job().to_dict(), "id": 3, "priority": 1})
        reply = worker.reader.read(time.monotonic() + 60)
        assert reply is not None and reply["event"] == "error" and reply["id"] == 3
        assert "unknown keys: priority" in reply["traceback"]
        fast = CONFIG.replace(measure_timing=False, guards=False, static_severity={"*": "warn"})
        result = worker.run(job(config=fast), time.monotonic() + 120)
        assert result["status"] == "ok", result["feedback"]
    finally:
        worker.stop()
