"""The tiny model's NKI family (`kernelrl.train.nki_chains`) as a `TaskFamily`: prompts, candidates, SFT data with
feedback-then-fix turns, and the gym's verdict condensed into a one-line feedback a tiny model can read.

Feedback (``feedback_mode="gym"``): the status, the NKI rule code of a compile error and the answer's statement it
names, ``nan`` when the output holds unwritten (NaN) elements, e.g. ``result: compile_error err-compute-on-hbm at 2``.
``feedback_mode="shuffled"`` is the no-information control of NKI-Agent's tool finding: the feedback of a turn is
drawn, independently of its answer, from `feedback_pool` (real gym feedback of other failed drafts), so it has the
same distribution but says nothing about this answer beyond "it failed" (an episode only goes on after a failure).
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, cast

from kernelrl.agent.episode_protocol import EpisodeProtocol, Verdict
from kernelrl.agent.feedback import TokenCounter
from kernelrl.evaluate import Candidate
from kernelrl.tasks.task import Task
from kernelrl.train import nki_chains as nc
from kernelrl.train.config import TaskConfig
from kernelrl.train.model import encode_answer, encode_prompt
from kernelrl.train.task_family import Judge, Pairs, feedback_fix_pairs

#: the candidate's line of the loop body's first statement (`nki_chains.CANDIDATE`)
FIRST_BODY_LINE = nc.CANDIDATE.split("\n").index("{body}") + 1


def short_feedback(result: Verdict) -> str:
    """The gym's verdict in one short line (status, rule code, statement number, ``nan``)."""
    if result is None:
        return "\nresult: no_answer\nfix:"
    parts = [str(result.status)]
    text = getattr(result, "error", None) or ""
    code = re.search(r"\[(err-[a-z0-9-]+)\]", text)
    if code:
        parts.append(code.group(1))
    line = re.search(r"candidate\.py:(\d+)", text)
    if line and code:
        parts.append(f"at {int(line.group(1)) - FIRST_BODY_LINE + 1}")
    if "got nan" in text:
        parts.append("nan")
    return "\nresult: " + " ".join(parts) + "\nfix:"


@dataclass
class NkiChainProtocol(EpisodeProtocol):
    """Chain prompts, NKI loop-body answers, one-line verdicts. No tool calls: each turn is one gym call
    (compile and verify), its verdict the next turn's feedback."""

    def opening_ids(self, tok: Any, subject: Any) -> list[int]:
        return encode_prompt(tok, nc.prompt_text(subject))

    def extract(self, text: str) -> str | None:
        raise NotImplementedError("the candidate depends on the chain: use NkiChainFamily.candidate(item, text)")

    #: "shuffled" mode (the no-information control): real feedback texts of failed drafts, one drawn per turn
    feedback_pool: list[str] = field(default_factory=list)

    def feedback(self, result: Verdict, count: TokenCounter | None = None) -> str:
        return short_feedback(result)

    def feedback_text(self, result: Verdict, response_ids: list[int] | None = None) -> str:
        """The next turn's feedback: the verdict's line, or in "shuffled" mode a pool text drawn from the answer's
        tokens alone (the same answer always draws the same text, whatever its verdict)."""
        if self.feedback_pool:
            return random.Random(zlib.crc32(repr(response_ids).encode())).choice(self.feedback_pool)
        return self.feedback(result)

    def feedback_ids(self, tok: Any, result: Verdict, response_ids: list[int]) -> list[int]:
        """What the episode loop appends after a verdict (`EngineDriver`): `feedback_text` as the next turn."""
        return self.next_turn_ids(tok, self.feedback_text(result, response_ids), response_ids)


class NkiChainFamily:
    """Elementwise chains and row reductions as NKI kernels, judged by the gym's ``nki`` backend."""

    name = "tiny-nki"
    backend = "nki"

    def __init__(self, train: list[tuple[str, ...]], heldout: list[tuple[str, ...]], rows: int = 256,
                 cols: int = 64, *, feedback_mode: str = "gym") -> None:
        if feedback_mode not in ("gym", "shuffled"):
            raise ValueError(f"feedback_mode must be 'gym' or 'shuffled', got {feedback_mode!r}")
        self.train_items: list[Hashable] = list(train)
        self.heldout_items: list[Hashable] = list(heldout)
        self.rows, self.cols = rows, cols
        self.protocol = NkiChainProtocol()
        self.feedback_mode = feedback_mode
        self._tasks: dict[Hashable, Task] = {}

    @classmethod
    def from_config(cls, cfg: TaskConfig, seed: int) -> NkiChainFamily:
        train, held = nc.split_chains(seed=seed, min_len=cfg.min_ops, max_len=cfg.max_ops, n_train=cfg.n_train,
                                      n_heldout=cfg.n_heldout)
        return cls(train, held, cfg.rows, cfg.cols)

    def with_feedback(self, mode: str, pool: list[str]) -> NkiChainFamily:
        """The same family (same items, same tasks) with another feedback mode and pool."""
        other = NkiChainFamily([], [], self.rows, self.cols, feedback_mode=mode)
        other.train_items, other.heldout_items, other._tasks = self.train_items, self.heldout_items, self._tasks
        if mode == "shuffled":  # the episode loop asks the protocol for feedback: the pool lives there
            other.protocol = NkiChainProtocol(feedback_pool=list(pool))
        return other

    def task(self, item: Hashable) -> Task:
        if item not in self._tasks:
            self._tasks[item] = nc.make_task(cast(tuple[str, ...], item), self.rows, self.cols)
        return self._tasks[item]

    def tokenizer_corpus(self) -> list[str]:
        fb = ["\nresult: " + s + "\nfix:" for s in ("ok", "incorrect nan", "compile_error err-compute-on-hbm at 1",
                                                     "compile_error err-shape-mismatch at 4",
                                                     "compile_error err-out-of-bound-access at 3")]
        return nc.tokenizer_corpus() + fb * 20

    def prompt_ids(self, tok: Any, item: Hashable) -> list[int]:
        return self.protocol.opening_ids(tok, item)

    def candidate(self, item: Hashable, text: str) -> Candidate | None:
        source = nc.candidate_source(cast(tuple[str, ...], item), text, self.rows, self.cols)
        return Candidate(source, self.backend) if source is not None else None

    def sft_pairs(self, tok: Any, items: list[Hashable], seed: int, per_item: int = 1) -> Pairs:
        """Single-turn pairs: each item's generated solution (`per_item` copies)."""
        return [(self.prompt_ids(tok, c), encode_answer(tok, nc.solution(cast(tuple[str, ...], c))))
                for c in items for _ in range(per_item)]

    def fix_pairs(self, tok: Any, items: list[Hashable], seed: int, judge: Judge) -> tuple[Pairs, list[str]]:
        """Feedback-then-fix pairs (`task_family.feedback_fix_pairs`): a draft with one mistake
        (`nki_chains.corrupt`), the gym's verdict of it as feedback, the correct kernel as the fix; the texts are
        `short_feedback`'s."""
        return feedback_fix_pairs(self, tok, items, seed, judge,
                                  draft=lambda chain, rng: nc.corrupt(chain, rng.choice(nc.applicable(chain)), rng),
                                  fix=lambda chain, rng: nc.solution(chain), feedback_text=short_feedback)
