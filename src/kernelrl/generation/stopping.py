"""When a sequence stops: stop token ids, stop strings (checked on a decoded tail), token budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelrl.generation.records import FinishReason, SamplingParams


class StopChecker:
    """Decides after each new token whether a sequence is done.

    Stop strings are matched on the decoded text of the last few tokens only (a window wide
    enough to hold the longest stop string), so the check costs O(window) per token rather than
    re-decoding the whole output. The token that completes a stop string is kept in the output.
    """

    def __init__(
        self, params: SamplingParams, tokenizer: Any | None, eos_token_ids: Sequence[int] = ()
    ) -> None:
        ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            ids.update(eos_token_ids)
        self.stop_ids = frozenset(ids)
        self.stop_strings = params.stop_strings
        if self.stop_strings and tokenizer is None:
            raise ValueError("SamplingParams.stop_strings needs an engine with a tokenizer")
        self.tokenizer = tokenizer
        self.window = 2 * max((len(s) for s in self.stop_strings), default=0) + 8

    def check(self, token_ids: Sequence[int], budget: int) -> tuple[FinishReason, int | str | None] | None:
        """(finish_reason, stop_reason) if the sequence `token_ids` (generated so far) is done, else None."""
        last = token_ids[-1]
        if last in self.stop_ids:
            return "stop", last
        if self.stop_strings:
            tail = self.tokenizer.decode(list(token_ids[-self.window :]), skip_special_tokens=True)
            for s in self.stop_strings:
                if s in tail:
                    return "stop", s
        if len(token_ids) >= budget:
            return "length", None
        return None
