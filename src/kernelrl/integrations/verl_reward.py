"""verl reward functions: score a completion through `kernelrl serve` (see `kernelrl.integrations.verl`)."""

from __future__ import annotations

import concurrent.futures as cf
from typing import Any

from kernelrl.agent.episode_loop import judge_answer
from kernelrl.agent.episode_protocol import AgentProtocol
from kernelrl.integrations.scoring import default_client, reward_from_result, reward_settings, task_spec

PROTOCOL = AgentProtocol()  # the episode protocol bench and the trainer share (candidate extraction)


def _job(solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None) -> tuple[Any, str, dict[str, Any]] | None:
    """The service job of one answer, through the episode loop's submission step (`judge_answer`); None:
    the answer holds no code, nothing is sent (reward 0)."""
    extra = extra_info or {}
    options: dict[str, Any] = {"backend": extra.get("backend", "cpu"), "priority": int(extra.get("priority", 0))}
    if isinstance(extra.get("eval_config"), dict):
        options["config"] = extra["eval_config"]
    return judge_answer(PROTOCOL, solution_str, lambda code: (task_spec(ground_truth, extra), code, options))


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  **kwargs: Any) -> float:
    """verl's `compute_score` signature: extract the candidate from `solution_str`, evaluate it through
    the service, score the result with `reward_from_result` (kwargs ``reward`` / ``reward_options`` pick the
    `kernelrl.rewards` entry, default `DEFAULT_REWARD`); 0 without code."""
    reward, reward_options = reward_settings(kwargs)
    job = _job(solution_str, ground_truth, extra_info)
    if job is None:
        return 0.0
    task, code, options = job
    client = kwargs.get("client") or default_client()
    result = client.evaluate(task, code, **options)
    return reward_from_result(result, reward, reward_options)


def compute_score_batch(data_sources: list[str], solution_strs: list[str], ground_truths: list[Any],
                        extra_infos: list[dict[str, Any] | None] | None = None, **kwargs: Any) -> list[float]:
    """The batch form verl's `batch` reward manager calls: all candidates evaluated concurrently; scored as
    in `compute_score`."""
    reward, reward_options = reward_settings(kwargs)
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    client = kwargs.get("client") or default_client()
    scores = [0.0] * len(solution_strs)
    jobs = [(i, _job(s, g, e)) for i, (s, g, e) in enumerate(zip(solution_strs, ground_truths, extras, strict=True))]
    runnable = [(i, j) for i, j in jobs if j is not None]
    futures = {}
    with cf.ThreadPoolExecutor(max_workers=max(1, min(len(runnable), client.max_concurrency))) as threads:
        for i, (task, code, options) in runnable:
            futures[threads.submit(client.evaluate, task, code, **options)] = i
        for future, i in futures.items():
            scores[i] = reward_from_result(future.result(), reward, reward_options)
    return scores
