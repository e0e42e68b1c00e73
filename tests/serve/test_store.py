"""The SQLite job store on its own: priorities, idempotency, queue limit, restart, one result per job."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelrl.serve.store import IdempotencyConflict, JobStore, NewJob, QueueFull, reference_key
from tests.serve.helpers import CHEAP, TASK

CANDIDATE = {"source": CHEAP, "backend": "cpu", "id": ""}


def job(priority: int = 0, key: str | None = None, seed: int = 0) -> NewJob:
    return NewJob(TASK, CANDIDATE, {"seed": seed}, priority, key)


def test_priority_then_arrival_order(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.sqlite")
    ids = [i for i, _, _ in store.add_many([job(0), job(5), job(0), job(-1), job(5)])]
    order = [store.claim_next().id for _ in range(5)]
    assert order == [ids[1], ids[4], ids[0], ids[2], ids[3]]
    assert store.claim_next() is None


def test_idempotency_and_conflicts_and_atomic_batches(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.sqlite")
    (first,) = store.add_many([job(key="k")])
    (again,) = store.add_many([job(key="k")])
    assert again == (first[0], "queued", True)
    with pytest.raises(IdempotencyConflict):
        store.add_many([job(key="fresh"), job(key="k", seed=1)])
    assert store.counts()["queued"] == 1  # the whole batch was rolled back


def test_queue_limit_counts_only_new_jobs(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.sqlite")
    store.add_many([job(key="a"), job(key="b")], max_queued=2)
    with pytest.raises(QueueFull, match="limit 2"):
        store.add_many([job(key="c")], max_queued=2)
    assert store.add_many([job(key="a")], max_queued=2)[0][2] is True


def test_restart_requeues_running_and_results_are_written_once(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = JobStore(path)
    (a, _, _), (b, _, _) = store.add_many([job(), job()])
    assert store.claim_next().id == a and store.claim_next().id == b
    assert store.finish(a, {"status": "ok"})
    assert not store.finish(a, {"status": "ok"})  # a second result is refused
    store.close()

    reopened = JobStore(path)  # as after a crash: b was running
    assert reopened.requeue_running() == 1
    again = reopened.claim_next()
    assert again.id == b and again.attempts == 2
    assert reopened.finish(b, None, "boom")
    assert [(r["state"], r["completions"]) for r in reopened.all_jobs()] == [("done", 1), ("done", 1)]
    assert reopened.get(b).error == "boom" and reopened.get(a).result == {"status": "ok"}


def test_cancel_only_queued_and_reference_timing_cache(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.sqlite")
    (a, _, _), (b, _, _) = store.add_many([job(), job()])
    assert store.claim_next().id == a
    assert not store.cancel(a) and store.cancel(b)
    key, settings = reference_key("hash", "cpu:x", "cpu", {"timing_trials": 5, "seed": 0})
    other, _ = reference_key("hash", "cuda:H100", "cpu", {"timing_trials": 5, "seed": 0})
    assert key != other and store.reference_timing(key) is None
    store.put_reference_timing(key, "hash", "cpu:x", settings, {"reference_ms": 1.5})
    assert store.reference_timing(key) == {"reference_ms": 1.5} and store.reference_timing(other) is None
