"""The Ray executor: one actor per GPU (or CPU) slot of a Ray cluster, each owning an EvalPool(workers=1).

A job whose actor dies mid-run is run once more on another actor (the dead one is replaced); if that
one dies too, the job ends `crashed` with both reasons. Multi-node works through any Ray cluster
address; `"local"` starts a single-node cluster in this process.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.evaluate import Candidate, EvalConfig, EvalResult
from kernelrl.evaluate.result import StageReport, Status
from kernelrl.serve.executors import EXECUTORS, Executor, device_label
from kernelrl.tasks import Task

ACTOR_START_TIMEOUT_S = 180.0


class _EvalActor:
    """Runs inside a Ray worker process: a one-worker EvalPool (candidate code still runs in a forked child)."""

    def __init__(self, config: dict[str, Any]) -> None:
        from kernelrl.evaluate import EvalPool

        self.pool = EvalPool(workers=1, config=EvalConfig.from_dict(config))
        self.jobs = 0

    def info(self) -> dict[str, Any]:
        import ray

        if ray.get_gpu_ids():
            import torch  # noqa: F401  (device_label then names the GPU)
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "device": device_label()}

    def evaluate(self, task: dict[str, Any], candidate: dict[str, Any], config: dict[str, Any], cached: dict | None) -> dict:
        self.jobs += 1
        future = self.pool.submit(Task.from_dict(task), Candidate(**candidate), EvalConfig.from_dict(config), cached)
        return future.result().to_dict()


@dataclass
class _Slot:
    id: int
    handle: Any
    info: dict[str, Any] = field(default_factory=dict)
    jobs: int = 0
    busy: bool = False


@EXECUTORS.register("ray")
class RayExecutor(Executor):
    """One `_EvalActor` per slot; slots default to the cluster's GPUs, else its CPUs."""

    name = "ray"

    def __init__(
        self,
        ray_address: str | None = "local",
        slots: int | None = None,
        use_gpus: bool | None = None,
        config: EvalConfig | None = None,
        ship_pythonpath: bool = True,
        **_: Any,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise RuntimeError("the ray executor needs Ray: pip install 'ray>=2.9'") from None
        self._ray = ray
        if not ray.is_initialized():
            env: dict[str, Any] = {}
            if ship_pythonpath:  # so actors import this kernelrl (source checkouts included)
                root = str(Path(__file__).resolve().parents[2])
                env["env_vars"] = {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
            if ray_address in (None, "", "local"):
                ray.init(num_cpus=slots, include_dashboard=False, runtime_env=env or None, log_to_driver=False)
            else:
                ray.init(address=ray_address, runtime_env=env or None, log_to_driver=False)
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        self.use_gpus = bool(gpus) if use_gpus is None else use_gpus
        self.capacity = slots or (gpus if self.use_gpus else max(1, int(resources.get("CPU", 1))))
        self.config = config or EvalConfig()
        self._remote = ray.remote(num_gpus=1, num_cpus=0)(_EvalActor) if self.use_gpus else ray.remote(num_cpus=1)(_EvalActor)
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._restarts = 0
        self._closed = False
        self._slots: list[_Slot] = [self._new_slot() for _ in range(self.capacity)]
        for slot in self._slots:
            self._wait_ready(slot)
        self.device = "ray:" + str(self._slots[0].info.get("device", "cpu"))
        self._threads = cf.ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix="ray-job")

    def _new_slot(self) -> _Slot:
        return _Slot(id=next(self._ids), handle=self._remote.remote(self.config.to_dict()))

    def _wait_ready(self, slot: _Slot) -> None:
        slot.info = self._ray.get(slot.handle.info.remote(), timeout=ACTOR_START_TIMEOUT_S)

    def _acquire(self, avoid: set[int]) -> _Slot:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the ray executor is closed")
                free = [s for s in self._slots if not s.busy]
                choice = next((s for s in free if s.id not in avoid), None)
                if choice is None and free and len(free) == len(self._slots):
                    choice = free[0]  # only slots we were told to avoid, and nothing else will come
                if choice is not None:
                    choice.busy = True
                    return choice
                self._cond.wait(timeout=1.0)

    def _release(self, slot: _Slot) -> None:
        with self._cond:
            slot.busy = False
            self._cond.notify_all()

    def _replace(self, dead: _Slot) -> None:
        """Swap a dead actor for a fresh one (its slot stays busy until the new actor is ready)."""
        try:
            self._ray.kill(dead.handle, no_restart=True)
        except Exception:
            pass
        fresh = self._new_slot()
        try:
            self._wait_ready(fresh)
        finally:
            with self._cond:
                self._restarts += 1
                self._slots = [fresh if s.id == dead.id else s for s in self._slots]
                self._cond.notify_all()

    def _run(self, task: Task, candidate: Candidate, config: EvalConfig, cached: dict[str, Any] | None) -> EvalResult:
        from ray.exceptions import GetTimeoutError, RayError

        reasons: list[str] = []
        tried: set[int] = set()
        for _attempt in range(2):
            slot = self._acquire(tried)
            tried.add(slot.id)
            try:
                ref = slot.handle.evaluate.remote(task.to_dict(), candidate.to_dict(), config.to_dict(), cached)
                result = EvalResult.from_dict(self._ray.get(ref))
                slot.jobs += 1
                self._release(slot)
                return result
            except (RayError, GetTimeoutError) as exc:
                reasons.append(f"ray actor {slot.id} (pid {slot.info.get('pid')}) died mid-job: {type(exc).__name__}: {str(exc)[:300]}")
                try:
                    self._replace(slot)
                except Exception as start_error:
                    reasons.append(f"replacing it failed: {start_error!r}")
                    with self._cond:
                        self._slots = [s for s in self._slots if s.id != slot.id] or self._slots
                        self._cond.notify_all()
        message = "the evaluation worker died twice on this job: " + "; ".join(reasons)
        return EvalResult(
            status=Status.CRASHED,
            task_id=task.id,
            backend=candidate.backend,
            stages=[StageReport(name="worker", status="crashed", duration_s=0.0, message=message)],
            error=message,
            feedback=f"status: crashed\n{message}",
        )

    def submit(
        self, task: Task, candidate: Candidate, config: EvalConfig, cached_reference: dict[str, Any] | None = None
    ) -> cf.Future[EvalResult]:
        return self._threads.submit(self._run, task, candidate, config, cached_reference)

    @property
    def restarts(self) -> int:
        return self._restarts

    def workers(self) -> dict[str, Any]:
        with self._cond:
            slots = list(self._slots)
        return {
            "executor": self.name,
            "device": self.device,
            "capacity": self.capacity,
            "busy": sum(s.busy for s in slots),
            "jobs_done": sum(s.jobs for s in slots),
            "restarts": self._restarts,
            "workers": [
                {"id": f"ray-{s.id}", "kind": "gpu" if self.use_gpus else "cpu", "busy": s.busy, "jobs": s.jobs, **s.info}
                for s in slots
            ],
        }

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._threads.shutdown(wait=False, cancel_futures=True)
        for slot in self._slots:
            try:
                self._ray.kill(slot.handle, no_restart=True)
            except Exception:
                pass
