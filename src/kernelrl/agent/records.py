"""`Turn` and `Trajectory`: what one episode of the agent loop produced, JSON-serialisable."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelrl.evaluate.result import EvalResult


@dataclass
class Usage:
    """Token counts of one or more model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += other.calls


@dataclass
class Turn:
    """One model answer and its evaluation.

    `messages` are the chat messages the model saw for this turn followed by its answer (and, in the
    tool-calling variant, the tool calls and tool results in between). `result` is the gym's
    `EvalResult` (None when no code could be extracted); in JSON it is ``EvalResult.to_dict()``.
    """

    index: int
    messages: list[dict[str, Any]]
    response: str
    code: str | None
    result: EvalResult | None
    reward: float
    feedback: str = ""  # what the model is told about this turn on the next one
    usage: Usage = field(default_factory=Usage)
    tool_calls: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.result, dict):
            raise TypeError("Turn.result is an EvalResult (or None), not its dict; use Turn.from_dict for JSON")

    @property
    def status(self) -> str:
        return str(self.result.status) if self.result else "no_code"

    @property
    def correct(self) -> bool:
        return self.result is not None and self.result.correct

    @property
    def speedup(self) -> float | None:
        """Speedup over eager PyTorch; None unless correct and timed meaningfully."""
        return self.result.speedup if self.result is not None and self.result.correct else None

    @property
    def speedup_vs_compiled(self) -> float | None:
        timing = self.result.timing if self.result is not None else None
        if not self.correct or timing is None or not timing.meaningful:
            return None
        return timing.speedup_vs_compiled

    def to_dict(self) -> dict[str, Any]:
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        data["usage"] = asdict(self.usage)
        data["result"] = self.result.to_dict() if self.result is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        data = dict(data)
        data["usage"] = Usage(**(data.get("usage") or {}))
        if data.get("result") is not None:
            data["result"] = EvalResult.from_dict(data["result"])
        return cls(**data)


@dataclass
class Trajectory:
    """All turns of one episode for one task and sample, plus why it stopped."""

    task_id: str
    backend: str
    sample: int = 0
    level: int | None = None
    policy: str = ""
    turns: list[Turn] = field(default_factory=list)
    stop_reason: str = ""  # target_reached | max_turns | policy_error | no_code
    error: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def usage(self) -> Usage:
        total = Usage()
        for turn in self.turns:
            total.add(turn.usage)
        return total

    @property
    def best_turn(self) -> Turn | None:
        """The correct turn with the highest speedup (the first correct one when none is timed)."""
        correct = [t for t in self.turns if t.correct]
        if not correct:
            return None
        return max(correct, key=lambda t: (t.speedup or 0.0, -t.index))

    def to_dict(self) -> dict[str, Any]:
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        data["turns"] = [t.to_dict() for t in self.turns]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        data["turns"] = [Turn.from_dict(t) for t in data.get("turns") or []]
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        return cls.from_dict(json.loads(text))
