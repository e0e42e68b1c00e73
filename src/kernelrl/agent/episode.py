"""One episode of the compile-verify-fix loop: prompt, answer, evaluate, feed back, repeat."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from kernelrl.agent.episode_loop import EpisodeRules, judge_answer, run_episodes
from kernelrl.agent.episode_protocol import AgentProtocol, EpisodeProtocol, Verdict
from kernelrl.agent.feedback import TokenCounter, approx_tokens
from kernelrl.agent.policies.base import Completion, Policy, PolicyError, RequestContext
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


@dataclass
class PolicyEpisode:
    """One bench episode's state inside the loop: its trajectory and the turn being written."""

    trajectory: Trajectory
    opening: list[dict[str, Any]]
    messages: list[dict[str, Any]] = field(default_factory=list)
    context: RequestContext = field(default_factory=RequestContext)
    usage: Usage = field(default_factory=Usage)
    offer: list[dict[str, Any]] | None = None
    completion: Completion | None = None
    tool_calls: int = 0
    code: str | None = None
    result: EvalResult | None = None
    sent: bool = False


class PolicyDriver:
    """The episode loop's steps at the message level: a `Policy` answers, OpenAI-style tool calls are
    answered by `ToolExecutor`, the answer is judged by the pool (`agent.episode_loop`)."""

    def __init__(self, task: Task, policy: Policy, pool: EvalPool, config: EpisodeConfig,
                 protocol: EpisodeProtocol, eval_config: EvalConfig | None, reward_fn: RewardFn,
                 count_tokens: TokenCounter) -> None:
        self.task, self.policy, self.pool, self.config = task, policy, pool, config
        self.protocol, self.eval_config, self.reward_fn = protocol, eval_config, reward_fn
        self.backend = config.prompt.backend
        self.executor = (ToolExecutor(pool, task, self.backend, eval_config, config.feedback_tokens, count_tokens)
                         if config.tools else None)

    def rules(self) -> EpisodeRules:
        return EpisodeRules(max_turns=self.config.max_turns, tools=self.config.tools,
                            max_tool_calls=self.config.max_tool_calls, target_speedup=self.config.target_speedup)

    def open(self, sample: int) -> PolicyEpisode:
        """A new episode, its first turn opened."""
        trajectory = Trajectory(task_id=self.task.id, backend=self.backend, sample=sample, level=self.task.level,
                                policy=getattr(self.policy, "name", type(self.policy).__name__))
        episode = PolicyEpisode(trajectory, self.protocol.opening(self.task))  # type: ignore[attr-defined]
        self.next_turn(episode, 0)
        return episode

    def next_turn(self, e: PolicyEpisode, turn: int) -> bool:
        c = self.config
        e.messages = _conversation(e.opening, e.trajectory.turns, c.history, self.protocol)
        sample = e.trajectory.sample
        e.context = RequestContext(task_id=self.task.id, sample=sample, turn=turn, seed=c.seed + 1000 * sample + turn)
        e.usage, e.tool_calls, e.offer = Usage(), 0, TOOL_SCHEMAS if self.executor else None
        e.completion, e.code, e.result, e.sent = None, None, None, False
        return True

    def generate(self, episodes: list[PolicyEpisode]) -> Iterator[PolicyEpisode]:
        for e in episodes:
            try:
                completion = self.policy.complete(e.messages, e.offer, e.context)
            except PolicyError as exc:
                e.trajectory.stop_reason, e.trajectory.error = "policy_error", str(exc)
                continue
            e.completion = completion
            e.usage.add(completion.usage)
            e.messages = [*e.messages, completion.message()]
            if completion.tool_calls and not self.calls_tool(e):  # unanswerable calls would make the history invalid
                e.messages[-1] = {"role": "assistant", "content": completion.text}
            yield e

    def calls_tool(self, e: PolicyEpisode) -> bool:
        return self.executor is not None and e.offer is not None and bool(e.completion and e.completion.tool_calls)

    def run_tools(self, e: PolicyEpisode) -> bool:
        """Answer every call; past `max_tool_calls` a call gets an error and the next request offers no tools,
        asking for the final answer."""
        assert self.executor is not None and e.completion is not None
        for call in e.completion.tool_calls:
            if e.tool_calls >= self.config.max_tool_calls:
                answer = json.dumps({"error": "tool call limit reached: reply with the final module"})
            else:
                e.tool_calls += 1
                try:
                    answer, _ = self.executor.run(call.name, call.parsed_arguments())
                except ValueError as exc:
                    answer = json.dumps({"error": f"bad arguments: {exc}"})
            e.messages.append({"role": "tool", "tool_call_id": call.id, "content": answer})
        if e.tool_calls >= self.config.max_tool_calls:
            e.offer = None
        return True

    def submitted(self, e: PolicyEpisode) -> bool:
        return e.sent

    def submit(self, e: PolicyEpisode) -> None:
        assert e.completion is not None

        def send(code: str) -> EvalResult:
            e.code = code
            return self.pool.evaluate(self.task, Candidate(code, self.backend), self.eval_config)

        e.sent, e.result = True, judge_answer(self.protocol, e.completion.text, send)

    def verdict(self, e: PolicyEpisode) -> Verdict:
        assert e.completion is not None
        turn = Turn(index=len(e.trajectory.turns), messages=e.messages, response=e.completion.text, code=e.code,
                    result=e.result, reward=self.reward_fn(e.result), usage=e.usage, tool_calls=e.tool_calls)
        turn.feedback = self.protocol.feedback(e.result)
        e.trajectory.turns.append(turn)
        return e.result

    def stop_reason(self, e: PolicyEpisode) -> str:
        return e.trajectory.stop_reason

    def stop(self, e: PolicyEpisode, reason: str) -> None:
        e.trajectory.stop_reason = reason


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
    """Run up to `max_turns` answer-evaluate-feedback rounds for `task` through the episode loop
    (`agent.episode_loop.run_episodes`, the trainer's loop too); never raises for model failures.

    `count_tokens` measures the feedback budget (pass the policy's tokenizer for exact counts).
    `protocol`: the episode protocol (opening prompt, extraction, feedback, next turn); default
    `episode_protocol(config, count_tokens)`, the one the trainer's suite family uses too.
    """
    config = config or EpisodeConfig()
    protocol = protocol or episode_protocol(config, count_tokens)
    driver = PolicyDriver(task, policy, pool, config, protocol, eval_config, reward_fn, count_tokens)
    episode = driver.open(sample)
    run_episodes(driver, [episode], driver.rules())
    trajectory = episode.trajectory
    trajectory.meta["episode"] = config.to_dict()
    return trajectory
