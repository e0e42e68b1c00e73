"""Shared by the verl and TRL bridges: candidate code from a completion (`kernelrl.agent.extract`), turn a task spec into
what the service accepts, score an `EvalResult`, and a process-wide service client.

The reward is a `kernelrl.rewards.REWARDS` entry chosen by name, by default `DEFAULT_REWARD`: the same
one bench episodes and `kernelrl train` use, so a bridge run and a kernelrl run score a result alike.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from kernelrl.evaluate.result import EvalResult
from kernelrl.rewards.kernel import DEFAULT_REWARD, get_reward
from kernelrl.tasks.task import Task

_CLIENT: Any = None
_CLIENT_LOCK = threading.Lock()


def reward_from_result(result: EvalResult, reward: str = DEFAULT_REWARD,
                       options: dict[str, Any] | None = None) -> float:
    """The `kernelrl.rewards.REWARDS` entry `reward` (default `DEFAULT_REWARD`) with `options`, of an
    `EvalResult`. An unknown name raises KeyError listing the known ones."""
    return float(get_reward(reward, **(options or {}))(result))


def reward_settings(kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The reward name and options a bridge was configured with: ``kwargs["reward"]`` (default
    `DEFAULT_REWARD`) and ``kwargs["reward_options"]`` (a mapping). Checks the name now and rejects the
    retired ``max_bonus`` (the bridges' old private reward) rather than silently ignoring it."""
    if "max_bonus" in kwargs:
        raise ValueError("max_bonus is no longer read: the bridges score with kernelrl.rewards; choose one with "
                         "reward=<name> and its options with reward_options={...}")
    name = str(kwargs.get("reward") or DEFAULT_REWARD)
    options = dict(kwargs.get("reward_options") or {})
    get_reward(name, **options)  # an unknown name fails here, before any evaluation
    return name, options


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
