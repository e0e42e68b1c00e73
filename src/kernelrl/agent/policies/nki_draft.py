"""`nki-draft`: a scripted NKI author whose first drafts carry the typical NKI mistakes and who repairs
them only from what the gym's feedback says. It stands in for a model in NKI-Agent's compile-verify-fix
loop (tool use lifted a strong model from 6% single-shot to 77%); its numbers show the mechanism, not the
paper's magnitudes, because its skill (the shipped reference kernel) and its mistake and repair rates are
set by hand. It is a test double of the agent loop and the bench runner; `kernelrl repro nki-agent` uses a
tiny model that learns (`kernelrl.repro.nki_agent`).

Per (task, sample), each mistake that applies to the task's reference kernel (`agent.nki_mistakes`) is in
the first draft with probability `mistake_rate`. On feedback (a tool's answer, or the next user turn) it
names the mistake the text points at (`diagnose`) and, with probability `fix_rate`, rewrites that part;
a misread or failed repair resubmits the same code. The policy is stateless: its current draft's mistakes
are recovered from the last code in the conversation. With tools it runs `compile` until the kernel
compiles, then `verify` until it passes, then answers; without tools it answers its current draft.
"""

from __future__ import annotations

import itertools
import json
import random
import zlib
from collections.abc import Collection, Mapping
from typing import Any

from kernelrl.agent.extract import extract_code
from kernelrl.agent.nki_mistakes import MISTAKES, applicable, diagnose, with_mistakes
from kernelrl.agent.policies.base import POLICIES, Completion, RequestContext, ToolCall
from kernelrl.agent.records import Usage

COMPILE_KINDS = frozenset({"partition", "psum", "missing_load"})


def stable_seed(*parts: object) -> int:
    """A seed from `parts` that is the same in every process (unlike `hash` of a str)."""
    return zlib.crc32("|".join(map(str, parts)).encode())


@POLICIES.register("nki-draft")
class NkiDraftPolicy:
    """Drafts an NKI kernel with mistakes and fixes what the feedback names (see the module doc)."""

    supports_tools = True

    def __init__(self, mistake_rate: float = 0.35, fix_rate: float = 0.8, seed: int = 0,
                 solutions: Mapping[str, str] | None = None,
                 forced: Mapping[str, Collection[str]] | None = None, name: str = "nki-draft") -> None:
        for label, value in (("mistake_rate", mistake_rate), ("fix_rate", fix_rate)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{label} must be in [0, 1], got {value}")
        if solutions is None:
            from kernelrl.tasks import load_solutions

            solutions = {s.task.id: s.source for s in load_solutions("nki")}
        self.solutions = dict(solutions)
        self.forced = {task: frozenset(kinds) for task, kinds in (forced or {}).items()}
        for task, kinds in self.forced.items():
            bad = kinds - set(MISTAKES)
            if bad:
                raise ValueError(f"forced mistakes for {task!r}: unknown kind(s) {sorted(bad)}; known: {', '.join(MISTAKES)}")
        self.mistake_rate, self.fix_rate, self.seed, self.name = mistake_rate, fix_rate, seed, name
        self._ids = itertools.count()

    def first_draft(self, task_id: str, sample: int) -> frozenset[str]:
        """The mistakes of the episode's first draft (the same with and without tools)."""
        if task_id in self.forced:
            return self.forced[task_id]
        rng = random.Random(stable_seed(self.seed, task_id, sample, "draft"))
        return frozenset(k for k in applicable(self.solutions[task_id]) if rng.random() < self.mistake_rate)

    def mistakes_in(self, task_id: str, code: str) -> frozenset[str] | None:
        """Which of its drafts `code` is (None: not one of this policy's drafts of the task)."""
        kinds, code = applicable(self.solutions[task_id]), code.strip()
        for n in range(len(kinds) + 1):
            for subset in itertools.combinations(kinds, n):
                if with_mistakes(self.solutions[task_id], set(subset)).strip() == code:
                    return frozenset(subset)
        return None

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                 context: RequestContext | None = None) -> Completion:
        context = context or RequestContext()
        task_id = context.task_id
        if task_id not in self.solutions:
            return self._reply(messages, f"I cannot write an NKI kernel for {task_id!r}: no reference kernel to draw on.")
        code, last_tool, feedback, attempt = _last_draft(messages)
        mistakes = self.mistakes_in(task_id, code) if code is not None else None
        if mistakes is None:
            mistakes, feedback = self.first_draft(task_id, context.sample), ""
        kind = diagnose(feedback) if feedback else None
        repair = random.Random(stable_seed(self.seed, task_id, context.sample, context.turn, attempt))
        fixed = kind in mistakes and repair.random() < self.fix_rate
        if fixed:
            mistakes = mistakes - {kind}
        draft = with_mistakes(self.solutions[task_id], mistakes)
        tool_names = {t["function"]["name"] for t in tools or []}
        if not tool_names:
            return self._reply(messages, f"```python\n{draft}\n```")
        if last_tool is None or (last_tool == "compile" and not _passed(feedback, "compile")):
            step = "compile"
        elif last_tool == "verify" and _passed(feedback, "verify"):
            return self._reply(messages, f"Verified. Final kernel:\n\n```python\n{draft}\n```")
        else:  # compiled, or a verify failure: a compile-kind repair is compiled again first
            step = "compile" if fixed and kind in COMPILE_KINDS else "verify"
        if step not in tool_names:
            return self._reply(messages, f"```python\n{draft}\n```")
        call = ToolCall(id=f"call_{next(self._ids)}", name=step, arguments=json.dumps({"code": draft}))
        return self._reply(messages, "", [call])

    @staticmethod
    def _reply(messages: list[dict[str, Any]], text: str, calls: list[ToolCall] | None = None) -> Completion:
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        usage = Usage(prompt_tokens=(prompt_chars + 3) // 4, completion_tokens=(len(text) + 3) // 4, calls=1)
        return Completion(text=text, usage=usage, tool_calls=calls or [],
                          finish_reason="tool_calls" if calls else "stop")


def _passed(feedback: str, tool: str) -> bool:
    try:
        data = json.loads(feedback)
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    return bool(data.get("compiled")) if tool == "compile" else data.get("status") == "ok"


def _last_draft(messages: list[dict[str, Any]]) -> tuple[str | None, str | None, str, int]:
    """The last code this policy sent (tool argument or answer), the tool it went to (None for an answer),
    the feedback text that followed, and how many assistant messages came before (the attempt number)."""
    code, tool, feedback, attempt = None, None, "", 0
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            attempt += 1
            for call in message.get("tool_calls") or []:
                try:
                    args = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    continue
                if isinstance(args, dict) and isinstance(args.get("code"), str):
                    code, tool, feedback = args["code"], call["function"]["name"], ""
            if not message.get("tool_calls"):
                answered = extract_code(str(message.get("content") or ""))
                if answered is not None:
                    code, tool, feedback = answered, None, ""
        elif role in ("tool", "user") and code is not None:
            feedback += str(message.get("content") or "")
    return code, tool, feedback, attempt
