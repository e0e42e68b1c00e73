"""Shared by the verl and TRL bridges: candidate code from a completion (`kernelrl.agent.extract`), turn a task spec into
what the service accepts, score an `EvalResult`, and a process-wide service client.

The reward is deliberately simple (the `rewards` package owns the full family): 0 when the
candidate is not correct, else 1 plus a speedup bonus clipped to [0, max_bonus].
"""

from __future__ import annotations

import json
import threading
from typing import Any

from kernelrl.evaluate.result import EvalResult
from kernelrl.tasks.task import Task

_CLIENT: Any = None
_CLIENT_LOCK = threading.Lock()


def reward_from_result(result: EvalResult, max_bonus: float = 1.0, bonus_weight: float = 1.0) -> float:
    """0 if not correct; else 1 + bonus_weight * clip(speedup - 1, 0, max_bonus)."""
    if not result.correct:
        return 0.0
    speedup = result.speedup
    bonus = 0.0 if speedup is None else min(max(speedup - 1.0, 0.0), max_bonus)
    return 1.0 + bonus_weight * bonus


def task_spec(ground_truth: Any, extra_info: dict[str, Any] | None = None) -> Task | dict[str, Any] | str:
    """What identifies the task, for the service: an inline Task (dict or KernelBench source) or a task id.

    `extra_info["task"]` (a Task dict) or `extra_info["task_id"]` win over `ground_truth`, which may be
    a Task dict, its JSON, KernelBench-format source, or a task id the server was started with.
    """
    extra = extra_info or {}
    if isinstance(extra.get("task"), dict):
        return extra["task"]
    if isinstance(extra.get("task_id"), str) and not isinstance(ground_truth, dict) and not _is_source(ground_truth):
        return extra["task_id"]
    if isinstance(ground_truth, dict):
        return ground_truth
    if isinstance(ground_truth, str):
        text = ground_truth.strip()
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = None
            if isinstance(data, dict):
                return data
        if _is_source(text):
            task_id = str(extra.get("task_id") or f"inline/{Task(id='', source=text).source_hash}")
            return Task(id=task_id, source=text)
        if text:
            return text
    raise ValueError(f"cannot tell the task from ground_truth={str(ground_truth)[:80]!r}; give a task id, a Task dict or source")


def _is_source(value: Any) -> bool:
    return isinstance(value, str) and "class Model" in value and "get_inputs" in value


def default_client() -> Any:
    """A process-wide `ServeClient` (URL and token from KERNELRL_SERVE_URL / KERNELRL_SERVE_TOKEN)."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            from kernelrl.serve.client import ServeClient

            _CLIENT = ServeClient()
        return _CLIENT


def set_default_client(client: Any) -> None:
    """Use this client (e.g. one with a token or other timeouts) for the module-level reward functions."""
    global _CLIENT
    with _CLIENT_LOCK:
        _CLIENT = client
