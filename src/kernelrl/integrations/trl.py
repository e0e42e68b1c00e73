"""TRL bridge: a reward function for `trl.GRPOTrainer` that scores completions through `kernelrl serve`.

    reward = make_reward_func()              # dataset rows carry a `task_id` (or `task`) column
    GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset, ...)

TRL calls it as `reward(prompts=..., completions=..., **columns)` and reads one float per completion.
The score is a `kernelrl.rewards` entry (`make_reward_func(reward=..., reward_options=...)`, default
`DEFAULT_REWARD`, the same as bench episodes and `kernelrl train`).
Completions may be plain text or conversational (a list of messages; the last one's content is used).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable
from typing import Any

from kernelrl.agent.episode_loop import judge_answer
from kernelrl.agent.episode_protocol import AgentProtocol
from kernelrl.integrations.scoring import default_client, reward_from_result, reward_settings, task_spec
from kernelrl.rewards.kernel import DEFAULT_REWARD

PROTOCOL = AgentProtocol()  # the episode protocol bench and the trainer share (candidate extraction)


def completion_text(completion: Any) -> str:
    """The text of one completion, standard (str) or conversational (list of {"role", "content"})."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        last = completion[-1]
        return str(last.get("content", "")) if isinstance(last, dict) else str(last)
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion or "")


def make_reward_func(
    client: Any = None, task_column: str = "task_id", backend: str = "cpu", reward: str = DEFAULT_REWARD,
    reward_options: dict[str, Any] | None = None, config: dict[str, Any] | None = None, name: str = "kernelrl_reward",
) -> Callable[..., list[float]]:
    """A `(prompts, completions, **kwargs) -> list[float]` reward; the task of row i comes from
    `kwargs[task_column][i]` (a task id, Task dict or KernelBench source) or `kwargs["task"][i]`.
    Each result is scored by the `kernelrl.rewards` entry `reward` with `reward_options` (checked here)."""
    reward_name, reward_opts = reward_settings({"reward": reward, "reward_options": reward_options})

    def score(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        service = client or default_client()
        column = kwargs.get(task_column) or kwargs.get("task")
        if column is None:
            raise KeyError(f"the dataset needs a {task_column!r} (or 'task') column naming each row's task")
        scores = [0.0] * len(completions)
        jobs = []
        for i, completion in enumerate(completions):  # the episode loop's submission step; no code: reward 0
            job = judge_answer(PROTOCOL, completion_text(completion), lambda code, i=i: (i, task_spec(column[i]), code))
            if job is not None:
                jobs.append(job)
        options: dict[str, Any] = {"backend": backend, **({"config": config} if config else {})}
        if jobs:
            with cf.ThreadPoolExecutor(max_workers=min(len(jobs), service.max_concurrency)) as threads:
                futures = {threads.submit(service.evaluate, task, code, **options): i for i, task, code in jobs}
                for future, i in futures.items():
                    scores[i] = reward_from_result(future.result(), reward_name, reward_opts)
        return scores

    score.__name__ = name  # TRL logs each reward under its function's name
    return score
