"""The one episode loop: turns, tool calls, gym submission and stop rules, for bench, the trainer and the bridges.

An episode is turns of: generate a segment -> it lands -> a segment that ends in a tool call gets the
tool's answer and generation goes on in the same turn, any other segment is the turn's answer and is
submitted to the gym at once (`TurnDriver.submit`; an answer without code is not sent: its verdict is
None) -> wait for the verdict -> stop (`EpisodeRules.stop_reason`) or open the next turn with feedback.

`run_episodes` runs that loop over a batch of episodes; a `TurnDriver` says how its steps are done:
`agent.episode.PolicyDriver` at the message level (bench's `run_episode`: a `Policy`, OpenAI-style tool
calls, one episode per thread) and `train.engine_episodes.EngineDriver` at the token level (the trainer, RFT,
held-out evaluation: the generation engine, plain-text tool calls, many episodes per engine batch, each
segment submitted to the gym as soon as it lands while the others still decode). The verl / TRL bridges
judge one generated answer with `judge_answer`, the loop's submission step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kernelrl.agent.episode_protocol import EpisodeProtocol, Verdict

E = TypeVar("E")
R = TypeVar("R")

@dataclass(frozen=True)
class EpisodeRules:
    """When an episode goes on: turns, tool calls per turn, and the early stops. The loop reads the turns
    and the stops; `tools` and `max_tool_calls` are what its drivers are built with (a driver's
    `run_tools` applies the limit: bench answers a call past it with an error and asks once more without
    tools, the trainer judges the turn as it stands)."""

    max_turns: int = 1
    tools: bool = False
    max_tool_calls: int = 0  # per turn
    stop_at_first_correct: bool = False  # the trainer's default (KernelGYM runs every episode to max_turns)
    target_speedup: float | None = None  # bench: stop once a correct kernel reaches this speedup

    def stop_reason(self, result: Verdict) -> str | None:
        """Why an episode ends after this verdict, or None when it goes on (turns permitting)."""
        if result is None or not result.correct:
            return None
        if self.target_speedup is not None and (result.speedup or 0.0) >= self.target_speedup:
            return "target_reached"
        return "solved" if self.stop_at_first_correct else None


class TurnDriver(Protocol[E]):
    """How the loop's steps are done for one kind of episode `E` (message- or token-level)."""

    def generate(self, episodes: list[E]) -> Iterable[E]:
        """Generate each episode's next segment; yield each episode as its segment lands. An episode whose
        policy fails is not yielded and gets `stop_reason(e) == "policy_error"`."""
        ...

    def calls_tool(self, episode: E) -> bool:
        """Whether the segment that just landed ends in a tool call the episode may answer."""
        ...

    def run_tools(self, episode: E) -> bool:
        """Answer the call(s) through the gym and append the answer; True: generate on in the same turn,
        False: the turn is judged as it stands (out of calls, tokens or context)."""
        ...

    def submitted(self, episode: E) -> bool:
        """Whether the current turn's answer was already sent to the gym."""
        ...

    def submit(self, episode: E) -> None:
        """Send the turn's answer to the gym now (no code: nothing is sent, the verdict is None)."""
        ...

    def verdict(self, episode: E) -> Verdict:
        """Wait for the turn's verdict and record the turn (reward, feedback)."""
        ...

    def next_turn(self, episode: E, turn: int) -> bool:
        """Open turn `turn` (the feedback on the last verdict); False: no room left, the episode ends."""
        ...

    def stop_reason(self, episode: E) -> str:
        """The episode's stop reason so far ("" while it runs)."""
        ...

    def stop(self, episode: E, reason: str) -> None:
        """End the episode with `reason`: max_turns, target_reached, solved, context_full (or the driver's
        policy_error)."""
        ...


def land(driver: TurnDriver[E], episode: E) -> bool:
    """A segment landed: True when it waits for a tool; otherwise its answer goes to the gym now."""
    if driver.submitted(episode):
        return False
    if driver.calls_tool(episode):
        return True
    driver.submit(episode)
    return False


def finish_turn(driver: TurnDriver[E], episodes: list[E], landed: Iterable[E]) -> list[tuple[E, Verdict]]:
    """Land `landed` as it comes, run the tool loop until every episode's answer is submitted, then wait
    for the verdicts; returns the episodes still running (policy failures left out) with theirs."""
    pending = [e for e in landed if land(driver, e)]
    while pending:
        go_on = []
        for e in pending:
            if driver.run_tools(e):
                go_on.append(e)
            else:
                driver.submit(e)
        pending = [e for e in driver.generate(go_on) if land(driver, e)]
    return [(e, driver.verdict(e)) for e in episodes if not driver.stop_reason(e)]


def run_episodes(driver: TurnDriver[E], episodes: list[E], rules: EpisodeRules, *,
                 first_turn_landed: bool = False) -> list[E]:
    """Run `episodes` to their end under `rules`; returns them, each with its stop reason set.

    `first_turn_landed`: the first turn's segments were generated outside the loop and each went through
    `land` as it finished (the trainer's CoPRIS scheduler); the loop goes on from their tool calls.
    """
    active = list(episodes)
    for turn in range(rules.max_turns):
        if turn:
            opened = []
            for e in active:
                if driver.next_turn(e, turn):
                    opened.append(e)
                else:
                    driver.stop(e, "context_full")
            active = opened
            if not active:
                break
        landed = active if turn == 0 and first_turn_landed else driver.generate(active)
        judged = finish_turn(driver, active, landed)
        active = []
        for e, result in judged:
            reason = rules.stop_reason(result)
            if reason:
                driver.stop(e, reason)
            else:
                active.append(e)
    for e in active:
        driver.stop(e, "max_turns")
    return episodes


def judge_answer(protocol: EpisodeProtocol, text: str, send: Callable[[str], R]) -> R | None:
    """The loop's submission step for one finished answer: its candidate source (`protocol.extract`) goes to
    `send`; an answer without code is not sent (None: no verdict, reward 0)."""
    code = protocol.extract(text)
    return None if code is None else send(code)
