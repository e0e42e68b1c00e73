"""One episode of the compile-verify-fix loop: prompt, answer, evaluate, feed back, repeat."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, model_validator

from kernelrl.agent.episode_protocol import AgentProtocol, EpisodeProtocol
from kernelrl.agent.feedback import TokenCounter, approx_tokens
from kernelrl.agent.policies.base import Policy, PolicyError, RequestContext
from kernelrl.agent.prompts import PromptConfig
from kernelrl.agent.records import Trajectory, Turn, Usage
from kernelrl.agent.tools import TOOL_SCHEMAS, ToolExecutor
from kernelrl.config_system import ConfigModel
from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.pool import EvalPool
from kernelrl.evaluate.result import EvalResult
from kernelrl.rewards.kernel import DEFAULT_REWARD, get_reward
from kernelrl.tasks.task import Task

RewardFn = Callable[[EvalResult | None], float]
HISTORY_MODES = ("all", "last")


def default_reward(result: EvalResult | None, name: str = DEFAULT_REWARD, **options: Any) -> float:
    """A turn's reward: the `kernelrl.rewards.REWARDS` entry `name` (default `DEFAULT_REWARD`, the one
    `kernelrl train` and the verl/TRL bridges use) with `options`, of the turn's `EvalResult`;
    0 for a turn without code (``result=None``)."""
    if result is None:
        return 0.0
    return float(get_reward(name, **options)(result))


class EpisodeConfig(ConfigModel):
    """How an episode runs: turns, history, feedback format and budget, early stop, tools."""

    max_turns: int = Field(1, ge=1)
    history: Literal[HISTORY_MODES] = "all"  # all: the whole conversation; last: first prompt + last answer + its feedback
    feedback_mode: Literal["text", "json"] = "text"
    feedback_tokens: int = Field(512, ge=1)
    target_speedup: float | None = Field(None, ge=0)  # stop once a correct kernel reaches this speedup
    tools: bool = False  # expose compile/verify/profile as tools the model calls itself
    max_tool_calls: int = Field(8, ge=0)  # per turn
    seed: int = 0
    prompt: PromptConfig = Field(default_factory=PromptConfig)

    @model_validator(mode="after")
    def _prompt_offers_tools(self) -> EpisodeConfig:
        if self.prompt.tools != self.tools:
            self.prompt.tools = self.tools
        return self


def episode_protocol(config: EpisodeConfig, count_tokens: TokenCounter = approx_tokens) -> AgentProtocol:
    """The agent protocol an episode config describes (prompt, feedback format and budget, target)."""
    return AgentProtocol(prompt=config.prompt, feedback_mode=config.feedback_mode,
                         feedback_tokens=config.feedback_tokens, target_speedup=config.target_speedup,
                         count_tokens=count_tokens)


def _conversation(opening: list[dict[str, Any]], turns: list[Turn], history: str,
                  protocol: EpisodeProtocol) -> list[dict[str, Any]]:
    """The messages the model sees at the start of the next turn."""
    if not turns:
        return list(opening)
    if history == "last":
        last = turns[-1]
        return [*opening, {"role": "assistant", "content": last.response}, protocol.next_message(last.feedback)]
    return [*turns[-1].messages, protocol.next_message(turns[-1].feedback)]


def run_episode(
    task: Task,
    policy: Policy,
    pool: EvalPool,
    config: EpisodeConfig | None = None,
    sample: int = 0,
    eval_config: EvalConfig | None = None,
    reward_fn: RewardFn = default_reward,
    count_tokens: TokenCounter = approx_tokens,
    protocol: AgentProtocol | None = None,
) -> Trajectory:
    """Run up to `max_turns` answer-evaluate-feedback rounds for `task`; never raises for model failures.

    `count_tokens` measures the feedback budget (pass the policy's tokenizer for exact counts).
    `protocol`: the episode protocol (opening prompt, extraction, feedback, next turn); default
    `episode_protocol(config, count_tokens)`, the one the trainer's suite family uses too.
    """
    config = config or EpisodeConfig()
    protocol = protocol or episode_protocol(config, count_tokens)
    backend = config.prompt.backend
    trajectory = Trajectory(task_id=task.id, backend=backend, sample=sample, level=task.level,
                            policy=getattr(policy, "name", type(policy).__name__))
    opening = protocol.opening(task)
    executor = ToolExecutor(pool, task, backend, eval_config, config.feedback_tokens, count_tokens) if config.tools else None
    for index in range(config.max_turns):
        messages = _conversation(opening, trajectory.turns, config.history, protocol)
        context = RequestContext(task_id=task.id, sample=sample, turn=index, seed=config.seed + 1000 * sample + index)
        usage, tool_calls = Usage(), 0
        offer = TOOL_SCHEMAS if executor else None
        try:
            while True:
                completion = policy.complete(messages, offer, context)
                usage.add(completion.usage)
                messages = [*messages, completion.message()]
                if executor is None or offer is None or not completion.tool_calls:
                    if completion.tool_calls:  # unanswerable calls would make the history invalid
                        messages[-1] = {"role": "assistant", "content": completion.text}
                    break
                for call in completion.tool_calls:
                    if tool_calls >= config.max_tool_calls:
                        answer = json.dumps({"error": "tool call limit reached: reply with the final module"})
                    else:
                        tool_calls += 1
                        try:
                            answer, _ = executor.run(call.name, call.parsed_arguments())
                        except ValueError as exc:
                            answer = json.dumps({"error": f"bad arguments: {exc}"})
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": answer})
                if tool_calls >= config.max_tool_calls:
                    offer = None  # one last request without tools asks for the final answer
        except PolicyError as exc:
            trajectory.stop_reason, trajectory.error = "policy_error", str(exc)
            break
        response = completion.text
        code = protocol.extract(response)
        result = None
        if code is not None:
            result = pool.evaluate(task, Candidate(code, backend), eval_config)
        turn = Turn(index=index, messages=messages, response=response, code=code, result=result,
                    reward=reward_fn(result), usage=usage, tool_calls=tool_calls)
        turn.feedback = protocol.feedback(result)
        trajectory.turns.append(turn)
        if config.target_speedup is not None and (turn.speedup or 0.0) >= config.target_speedup:
            trajectory.stop_reason = "target_reached"
            break
    else:
        trajectory.stop_reason = "max_turns"
    trajectory.meta["episode"] = config.to_dict()
    return trajectory
