"""The episode protocol: one object that says how an episode reads, used by bench, train and integrations.

It fixes how a task becomes the opening prompt, how a candidate comes out of a response, the feedback
text of a gym verdict, what opens the next turn, and the tool-call syntax of plain-text (token-level)
policies. `AgentProtocol` is the kernel-module agent's (bench's `run_episode`, the trainer's suite
family); `kernelrl.train.task_family.TinyProtocol` is the tiny model's short variant of it.

Plain-text tool calls: a response segment ``<tool>NAME</tool>`` (NAME one of compile / verify /
profile) ends generation (``</tool>`` is a stop string). The call acts on the candidate written so far
in the turn; the rollout runs it through `kernelrl.agent.tools.ToolExecutor` against the gym pool and
appends the answer as ``<tool_output>...</tool_output>`` (the environment's tokens: context, never
trained on), then the policy continues the same turn. The turn's final answer is what follows the last
tool output (tool markup removed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kernelrl.agent.extract import extract_code
from kernelrl.agent.feedback import TokenCounter, approx_tokens, format_feedback
from kernelrl.agent.prompts import PromptConfig, initial_messages
from kernelrl.agent.tools import TOOL_NAMES, ToolExecutor
from kernelrl.evaluate.result import EvalResult

Verdict = EvalResult | None  # the gym's verdict; None: the answer held no code
_SENTINEL = "\x00KERNELRL-RESPONSE\x00"


@dataclass
class EpisodeProtocol:
    """The syntax shared by every episode loop; subclasses fill in prompts, extraction and feedback."""

    tool_open: str = "<tool>"
    tool_close: str = "</tool>"
    output_open: str = "\n<tool_output>"
    output_close: str = "</tool_output>\n"

    # ---------------------------------------------------------------- tool-call syntax

    @property
    def tool_stop(self) -> str:
        """The stop string that ends generation at a tool call."""
        return self.tool_close

    def _tag(self) -> re.Pattern[str]:
        return re.compile(re.escape(self.tool_open) + r"\s*([A-Za-z_]\w*)\s*" + re.escape(self.tool_close))

    def tool_call(self, text: str) -> str | None:
        """The tool name of a call that ends `text` (its last call, with no tool output after it), else None."""
        calls = list(self._tag().finditer(text))
        if not calls or self.output_open.strip() in text[calls[-1].end():]:
            return None
        return calls[-1].group(1)

    def tool_text(self, name: str) -> str:
        """How a policy writes a call (SFT data, docs)."""
        return f"{self.tool_open}{name}{self.tool_close}"

    def without_tools(self, text: str) -> str:
        """`text` with its tool outputs and tool-call markup removed."""
        spans = re.compile(re.escape(self.output_open.strip()) + r".*?(?:" + re.escape(self.output_close.strip())
                           + r"|$)", re.S)
        return self._tag().sub("", spans.sub("", text))

    def last_segment(self, text: str) -> str:
        """What follows the last tool output (markup removed): the part written after the last answer."""
        close = self.output_close.strip()
        return self.without_tools(text.rsplit(close, 1)[1] if close in text else text)

    def answer(self, text: str) -> str:
        """The final answer of a turn, the text the gym judges (default: everything but the tool text)."""
        return self.without_tools(text)

    def run_tool(self, executor: ToolExecutor, name: str, text: str) -> tuple[str, EvalResult | None]:
        """Run the call that ends `text` on the candidate written so far (`extract`) and return the text
        appended to the context (wrapped in the output tags) and the evaluation behind it."""
        code = self.extract(text)
        if name not in TOOL_NAMES:
            answer, result = f"unknown tool {name!r}; available: {', '.join(TOOL_NAMES)}", None
        elif code is None:
            answer, result = "no code found to run the tool on", None
        else:
            answer, result = self.describe_tool(executor, name, code)
        return f"{self.output_open}{answer}{self.output_close}", result

    def describe_tool(self, executor: ToolExecutor, name: str, code: str) -> tuple[str, EvalResult | None]:
        """The tool's answer text (the agent's JSON) and its evaluation."""
        return executor.run(name, {"code": code})

    # ---------------------------------------------------------------- per-family parts

    def opening_ids(self, tok: Any, subject: Any) -> list[int]:
        """The opening prompt's token ids for a task (or the family's task item)."""
        raise NotImplementedError

    def extract(self, text: str) -> str | None:
        """The candidate source in a response, or None."""
        raise NotImplementedError

    def feedback(self, result: Verdict, count: TokenCounter | None = None) -> str:
        """The next turn's feedback text for a verdict (None: the answer held no code)."""
        raise NotImplementedError

    def next_message(self, feedback: str) -> dict[str, Any]:
        """The chat message that opens the next turn (message-level policies)."""
        return {"role": "user", "content": feedback}

    def next_turn_ids(self, tok: Any, feedback: str, response_ids: list[int]) -> list[int]:
        """Tokens appended after a response to open the next turn (token-level policies)."""
        return list(tok.encode(feedback, add_special_tokens=False))

    def feedback_ids(self, tok: Any, result: Verdict, response_ids: list[int]) -> list[int]:
        """The tokens that open the next turn after a verdict (token-level policies): its `feedback`, the
        budget counted in `tok`'s tokens, as `next_turn_ids`."""
        text = self.feedback(result, lambda s: len(tok.encode(s, add_special_tokens=False)))
        return self.next_turn_ids(tok, text, response_ids)


@dataclass
class AgentProtocol(EpisodeProtocol):
    """The kernel-module agent: the agent's prompts, fenced Python answers, `format_feedback` verdicts."""

    prompt: PromptConfig = field(default_factory=PromptConfig)
    feedback_mode: str = "text"
    feedback_tokens: int = 512
    target_speedup: float | None = None
    count_tokens: TokenCounter = approx_tokens

    def opening(self, task: Any) -> list[dict[str, Any]]:
        """The opening messages for a `Task`."""
        return initial_messages(task, self.prompt)

    def opening_ids(self, tok: Any, task: Any) -> list[int]:
        """The opening prompt's token ids: chat-templated, or the agent's plain fallback format."""
        from kernelrl.agent.policies.local import fallback_chat_format

        messages = self.opening(task)
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return list(tok.encode(text, add_special_tokens=False))
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        return bos + list(tok.encode(fallback_chat_format(messages), add_special_tokens=False))

    def extract(self, text: str) -> str | None:
        return extract_code(self.answer(text))

    def feedback(self, result: Verdict, count: TokenCounter | None = None) -> str:
        return format_feedback(result, self.feedback_mode, self.feedback_tokens, self.target_speedup,
                               count or self.count_tokens)

    def next_turn_ids(self, tok: Any, feedback: str, response_ids: list[int]) -> list[int]:
        """The feedback as the next user turn of the tokenizer's chat template (or the plain format)."""
        from kernelrl.agent.policies.local import fallback_chat_format

        if getattr(tok, "chat_template", None):
            convo = [{"role": "user", "content": "task"}, {"role": "assistant", "content": _SENTINEL},
                     self.next_message(feedback)]
            rendered = tok.apply_chat_template(convo, tokenize=False, add_generation_prompt=True)
            ids = tok.encode(rendered.split(_SENTINEL, 1)[1], add_special_tokens=False)
        else:
            ids = tok.encode("\n" + fallback_chat_format([self.next_message(feedback)]), add_special_tokens=False)
        if response_ids and ids and response_ids[-1] == ids[0]:  # the response already ended its turn
            ids = ids[1:]
        return list(ids)
