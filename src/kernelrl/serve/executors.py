"""Executors run evaluations for the service behind one interface: the local pool (default) or Ray.

An executor takes (task, candidate, config, cached reference timing) and returns a future of an
`EvalResult`. A worker that dies mid-job has the job run once more; a second death is reported as
a `crashed` result that names the reason, never as a lost job.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import platform
import sys
import threading
from abc import ABC, abstractmethod
from typing import Any

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, EvalResult
from kernelrl.registry import Registry
from kernelrl.tasks import Task


def device_label() -> str:
    """A label for this machine's evaluation device (a key of the reference-timing cache)."""
    if os.environ.get("KERNELRL_DEVICE_LABEL"):
        return os.environ["KERNELRL_DEVICE_LABEL"]
    torch = sys.modules.get("torch")  # only when already imported (the pool imports it to count GPUs)
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return f"cuda:{torch.cuda.get_device_name(0)}"
        except Exception:
            pass
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"cpu:{model}"


class Executor(ABC):
    """Runs evaluations; `capacity` jobs at once."""

    name: str = ""
    capacity: int = 1
    device: str = "cpu"

    @abstractmethod
    def submit(
        self, task: Task, candidate: Candidate, config: EvalConfig, cached_reference: dict[str, Any] | None = None
    ) -> cf.Future[EvalResult]: ...

    @abstractmethod
    def workers(self) -> dict[str, Any]:
        """What the executor runs on (for `GET /v1/workers`)."""

    @property
    def restarts(self) -> int:
        return 0

    def close(self) -> None:  # noqa: B027  (optional hook; nothing to release by default)
        """Stop the workers."""


EXECUTORS: Registry[type[Executor]] = Registry("executor")


@EXECUTORS.register("local")
class LocalExecutor(Executor):
    """The in-machine pool of warm, forking supervisor processes (`kernelrl.evaluate.EvalPool`)."""

    name = "local"

    def __init__(self, workers: int | None = None, config: EvalConfig | None = None, **_: Any) -> None:
        """`workers` slots; default one per core, or one per GPU where there are GPUs."""
        self.pool = EvalPool(workers=workers, config=config)
        self.capacity = self.pool.size
        self.device = device_label()
        self._busy = 0
        self._done = 0
        self._lock = threading.Lock()

    def submit(
        self, task: Task, candidate: Candidate, config: EvalConfig, cached_reference: dict[str, Any] | None = None
    ) -> cf.Future[EvalResult]:
        with self._lock:
            self._busy += 1
        future = self.pool.submit(task, candidate, config, cached_reference=cached_reference)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _: cf.Future[EvalResult]) -> None:
        with self._lock:
            self._busy -= 1
            self._done += 1

    @property
    def restarts(self) -> int:
        return self.pool.restarts

    def workers(self) -> dict[str, Any]:
        with self._lock:
            busy, done = self._busy, self._done
        return {
            "executor": self.name,
            "device": self.device,
            "capacity": self.capacity,
            "busy": busy,
            "jobs_done": done,
            "restarts": self.pool.restarts,
            "workers": [{"id": f"local-{i}", "kind": "supervisor"} for i in range(self.capacity)],
        }

    def close(self) -> None:
        self.pool.close()


def make_executor(name: str, **options: Any) -> Executor:
    """Build an executor by registry name (`local`, `ray`)."""
    if name == "ray" and "ray" not in EXECUTORS:
        import kernelrl.serve.ray_executor  # noqa: F401  (registers "ray")
    return EXECUTORS.get(name)(**options)
