"""The `Policy` interface: chat messages in, one assistant message (text or tool calls) out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kernelrl.agent.records import Usage
from kernelrl.registry import Registry


class PolicyError(RuntimeError):
    """The policy could not produce an answer (endpoint down after retries, generation failed)."""


@dataclass
class ToolCall:
    """One OpenAI-style function call requested by the model; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> dict[str, Any]:
        value = json.loads(self.arguments or "{}")
        if not isinstance(value, dict):
            raise ValueError("tool arguments must be a JSON object")
        return value

    def to_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Completion:
    """What a policy answered to one request."""

    text: str
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = ""
    retries: int = 0

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_message() for c in self.tool_calls]
        return msg


@dataclass
class RequestContext:
    """Who is asking: lets scripted policies replay per task and sample, and others seed sampling."""

    task_id: str = ""
    sample: int = 0
    turn: int = 0
    seed: int | None = None


@runtime_checkable
class Policy(Protocol):
    name: str
    supports_tools: bool

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
        context: RequestContext | None = None,
    ) -> Completion: ...


POLICIES: Registry[Any] = Registry("policy")


def make_policy(name: str, **options: Any) -> Policy:
    """Build a registered policy by name (`openai`, `transformers`, `scripted`) with its options."""
    import kernelrl.agent.policies  # noqa: F401  (registers the built-in policies)

    return POLICIES.get(name)(**options)
