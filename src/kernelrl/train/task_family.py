"""What the trainer needs from a task family: items, their tasks and prompts, candidates, SFT data, feedback.

`TaskFamily` is the interface; `TinyFamily` wraps the tiny model's synthetic op chains
(`kernelrl.train.elementwise_chains`), `SuiteFamily` (`kernelrl.train.suite_family`) real
KernelBench-format suites.
`make_family` builds the one a `TaskConfig` names.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any, Protocol, cast, runtime_checkable

from kernelrl.evaluate import Candidate, EvalResult
from kernelrl.evaluate.result import Status
from kernelrl.tasks.task import Task
from kernelrl.train import elementwise_chains as chains
from kernelrl.train.config import TaskConfig
from kernelrl.train.model import encode_answer, encode_prompt

Pairs = list[tuple[list[int], list[int]]]
NO_CODE = "no_code"


@runtime_checkable
class TaskFamily(Protocol):
    """A family of tasks the trainer samples from; items are hashable ids (a chain, a task id)."""

    name: str
    train_items: list[Hashable]
    heldout_items: list[Hashable]

    def task(self, item: Hashable) -> Task:
        """The gym `Task` of an item."""
        ...

    def tokenizer_corpus(self) -> list[str]:
        """Texts a locally built (tiny) tokenizer is trained on."""
        ...

    def prompt_ids(self, tok: Any, item: Hashable) -> list[int]:
        """The first prompt's token ids (chat-templated when the tokenizer has a template)."""
        ...

    def candidate(self, item: Hashable, text: str) -> Candidate | None:
        """The candidate in a response text, or None when it holds no code."""
        ...

    def sft_pairs(self, tok: Any, items: list[Hashable], seed: int) -> Pairs:
        """(prompt ids, answer ids) warm-up pairs for `items` (empty when the family has none)."""
        ...

    def feedback_text(self, result: EvalResult | None) -> str:
        """The next user turn of a multi-turn episode, from the gym's verdict."""
        ...

    def next_turn_ids(self, tok: Any, result: EvalResult | None, response_ids: list[int]) -> list[int]:
        """Tokens appended after a response to open the next turn (feedback, then the answer cue)."""
        ...


def no_code_result(task: Task, backend: str) -> EvalResult:
    """The verdict of an answer without code (never sent to the gym): a compile error, reward 0."""
    return EvalResult(Status.COMPILE_ERROR, task.id, backend, error="no code found in the answer", notes=[NO_CODE])


class TinyFamily:
    """The tiny model's fused elementwise chains (`kernelrl.train.elementwise_chains`), answers are C
    loop bodies.

    ``hybrid=True`` (``task.hybrid``): an answer may leave ops to PyTorch
    (`elementwise_chains.hybrid_candidate_source`; the gym must run with ``torch_ops="allow"``), and a `lazy_fraction` of the SFT answers are lazy ones
    (one op in C, the rest in torch), so Dr. Kernel's lazy optimisation exists at the start of RL."""

    name = "tiny-elementwise"

    def __init__(self, train: list[tuple[str, ...]], heldout: list[tuple[str, ...]], rows: int = 512,
                 cols: int = 1024, *, hybrid: bool = False, lazy_fraction: float = 0.0) -> None:
        self.train_items: list[Hashable] = list(train)
        self.heldout_items: list[Hashable] = list(heldout)
        self.rows, self.cols = rows, cols
        self.hybrid, self.lazy_fraction = hybrid, lazy_fraction
        self._tasks: dict[Hashable, Task] = {}

    @classmethod
    def from_config(cls, cfg: TaskConfig, seed: int) -> TinyFamily:
        train, held = chains.split_chains(seed=seed, min_len=cfg.min_ops, max_len=cfg.max_ops, n_train=cfg.n_train,
                                        n_heldout=cfg.n_heldout)
        return cls(train, held, cfg.rows, cfg.cols, hybrid=cfg.hybrid, lazy_fraction=cfg.lazy_fraction)

    def task(self, item: Hashable) -> Task:
        if item not in self._tasks:
            self._tasks[item] = chains.make_task(item, self.rows, self.cols)  # type: ignore[arg-type]
        return self._tasks[item]

    def tokenizer_corpus(self) -> list[str]:
        return chains.tokenizer_corpus(hybrid=self.hybrid)

    def prompt_ids(self, tok: Any, item: Hashable) -> list[int]:
        return encode_prompt(tok, chains.prompt_text(item))  # type: ignore[arg-type]

    def candidate(self, item: Hashable, text: str) -> Candidate | None:
        return Candidate(chains.hybrid_candidate_source(text) if self.hybrid else chains.candidate_source(text), "cpu")

    def sft_pairs(self, tok: Any, items: list[Hashable], seed: int, per_item: int = 2) -> Pairs:
        """Generated solutions, each op's C form drawn at random (fast and slow ones); in hybrid mode a
        `lazy_fraction` of them are lazy (`elementwise_chains.lazy_solution`)."""
        rng = random.Random(seed)
        lazy = random.Random(seed + 1)
        pairs: Pairs = []
        for c in items:
            chain = cast(tuple[str, ...], c)
            for _ in range(per_item):
                lazy_one = self.hybrid and lazy.random() < self.lazy_fraction
                text = chains.lazy_solution(chain, rng) if lazy_one else chains.solution(chain, rng)
                pairs.append((self.prompt_ids(tok, c), encode_answer(tok, text)))
        return pairs

    def feedback_text(self, result: EvalResult | None) -> str:
        """The gym's status only, short enough for a tiny model; a correct turn (refined further when
        episodes run to the turn limit) also gets its speedup, rounded to 0.1."""
        status = str(result.status) if result is not None else "no_answer"
        if result is not None and result.correct and result.speedup:
            return f"\nresult: {status} {result.speedup:.1f}x\nfaster:"
        return f"\nresult: {status}\nfix:"

    def next_turn_ids(self, tok: Any, result: EvalResult | None, response_ids: list[int]) -> list[int]:
        return tok.encode(self.feedback_text(result), add_special_tokens=False)


def make_family(cfg: TaskConfig, seed: int) -> TaskFamily:
    """The family `cfg.family` names, with its seeded train / held-out split."""
    if cfg.family == "suite":
        from kernelrl.train.suite_family import SuiteFamily

        return SuiteFamily.from_config(cfg, seed)
    return TinyFamily.from_config(cfg, seed)
