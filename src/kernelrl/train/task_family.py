"""What the trainer needs from a task family: items, their tasks and prompts, candidates, SFT data, feedback.

`TaskFamily` is the interface; `TinyFamily` wraps the tiny model's synthetic op chains
(`kernelrl.train.elementwise_chains`), `SuiteFamily` (`kernelrl.train.suite_family`) real
KernelBench-format suites.
`make_family` builds the one a `TaskConfig` names.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast, runtime_checkable

from kernelrl.agent.episode_protocol import EpisodeProtocol, Verdict
from kernelrl.agent.feedback import TokenCounter
from kernelrl.agent.tools import ToolExecutor
from kernelrl.evaluate import Candidate, EvalResult
from kernelrl.evaluate.result import Status
from kernelrl.rewards.kernel import compiled
from kernelrl.tasks.task import Task
from kernelrl.train import elementwise_chains as chains
from kernelrl.train.config import TaskConfig
from kernelrl.train.model import encode_answer, encode_prompt

Pairs = list[tuple[list[int], list[int]]]
Judge = Callable[[Hashable, str], "cf.Future[EvalResult]"]  # item, answer text -> its verdict, to come


@runtime_checkable
class TaskFamily(Protocol):
    """A family of tasks the trainer samples from; items are hashable ids (a chain, a task id)."""

    name: str
    train_items: list[Hashable]
    heldout_items: list[Hashable]
    protocol: EpisodeProtocol  # prompts, extraction, feedback, next turn and tool-call syntax
    backend: str

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



@dataclass
class TinyProtocol(EpisodeProtocol):
    """The tiny model's episode protocol: chain prompts, C loop-body answers, one-line verdicts and
    tool outputs (``<out>ok</out>``) short enough for a tiny model and context."""

    output_open: str = "\n<out>"
    output_close: str = "</out>"
    hybrid: bool = False

    def opening_ids(self, tok: Any, subject: Any) -> list[int]:
        return encode_prompt(tok, chains.prompt_text(subject))

    def answer(self, text: str) -> str:
        """The loop body written after the last tool output (a call's draft is not the answer)."""
        return self.last_segment(text)

    def extract(self, text: str) -> str | None:
        body = self.answer(text)
        return chains.hybrid_candidate_source(body) if self.hybrid else chains.candidate_source(body)

    def feedback(self, result: Verdict, count: TokenCounter | None = None) -> str:
        """The gym's status only; a correct turn (refined further when episodes run to the turn limit)
        also gets its speedup, rounded to 0.1. An answer without code reads as a compile error (what the
        tiny model was always told for it)."""
        status = str(result.status) if result is not None else str(Status.COMPILE_ERROR)
        if result is not None and result.correct and result.speedup:
            return f"\nresult: {status} {result.speedup:.1f}x\nfaster:"
        return f"\nresult: {status}\nfix:"

    def describe_tool(self, executor: ToolExecutor, name: str, code: str) -> tuple[str, EvalResult | None]:
        """One word: ``ok`` / ``error`` for compile, the gym's status for verify and profile."""
        _, result = executor.run(name, {"code": code})
        if result is None:
            return "error", None
        if name == "compile":
            return ("ok" if compiled(result) else "error"), result
        return str(result.status), result


class TinyFamily:
    """The tiny model's fused elementwise chains (`kernelrl.train.elementwise_chains`), answers are C
    loop bodies.

    ``hybrid=True`` (``task.hybrid``): an answer may leave ops to PyTorch
    (`elementwise_chains.hybrid_candidate_source`; the gym must run with ``torch_ops="allow"``), and a `lazy_fraction` of the SFT answers are lazy ones
    (one op in C, the rest in torch), so Dr. Kernel's lazy optimisation exists at the start of RL."""

    name = "tiny-elementwise"
    backend = "cpu"

    def __init__(self, train: list[tuple[str, ...]], heldout: list[tuple[str, ...]], rows: int = 512,
                 cols: int = 1024, *, hybrid: bool = False, lazy_fraction: float = 0.0,
                 tool_fraction: float = 0.0) -> None:
        self.train_items: list[Hashable] = list(train)
        self.heldout_items: list[Hashable] = list(heldout)
        self.rows, self.cols = rows, cols
        self.hybrid, self.lazy_fraction, self.tool_fraction = hybrid, lazy_fraction, tool_fraction
        self.protocol = TinyProtocol(hybrid=hybrid)
        self._tasks: dict[Hashable, Task] = {}

    @classmethod
    def from_config(cls, cfg: TaskConfig, seed: int) -> TinyFamily:
        train, held = chains.split_chains(seed=seed, min_len=cfg.min_ops, max_len=cfg.max_ops, n_train=cfg.n_train,
                                        n_heldout=cfg.n_heldout)
        return cls(train, held, cfg.rows, cfg.cols, hybrid=cfg.hybrid, lazy_fraction=cfg.lazy_fraction,
                   tool_fraction=cfg.tool_fraction)

    def task(self, item: Hashable) -> Task:
        if item not in self._tasks:
            self._tasks[item] = chains.make_task(item, self.rows, self.cols)  # type: ignore[arg-type]
        return self._tasks[item]

    def tokenizer_corpus(self) -> list[str]:
        corpus = chains.tokenizer_corpus(hybrid=self.hybrid)
        if self.tool_fraction > 0:  # the tool syntax, often enough that calls and outputs are a few tokens each
            p = self.protocol
            corpus += [p.tool_text(t) + p.output_open + out + p.output_close
                       for t in ("compile", "verify") for out in ("ok", "error")] * 100
        return corpus

    def prompt_ids(self, tok: Any, item: Hashable) -> list[int]:
        return self.protocol.opening_ids(tok, item)

    def candidate(self, item: Hashable, text: str) -> Candidate | None:
        source = self.protocol.extract(text)
        return Candidate(source, self.backend) if source is not None else None

    def _tool_answer(self, body: str, tool: str, output: str) -> str:
        """An answer that drafts `body`, calls `tool` on it, reads `output`, then gives the final body."""
        p = self.protocol
        return f"{body}{p.tool_text(tool)}{p.output_open}{output}{p.output_close}{body}"

    def sft_pairs(self, tok: Any, items: list[Hashable], seed: int, per_item: int = 2) -> Pairs:
        """Generated solutions, each op's C form drawn at random (fast and slow ones); in hybrid mode a
        `lazy_fraction` of them are lazy (`elementwise_chains.lazy_solution`); a `tool_fraction` of them
        first compile their draft with a plain-text tool call (``<tool>compile</tool>``), read the
        verdict ``ok`` and then give the body again, so a policy calls tools from the start of RL."""
        rng = random.Random(seed)
        lazy = random.Random(seed + 1)
        tools = random.Random(seed + 2)
        pairs: Pairs = []
        for c in items:
            chain = cast(tuple[str, ...], c)
            for _ in range(per_item):
                lazy_one = self.hybrid and lazy.random() < self.lazy_fraction
                text = chains.lazy_solution(chain, rng) if lazy_one else chains.solution(chain, rng)
                if self.tool_fraction > 0 and tools.random() < self.tool_fraction:
                    text = self._tool_answer(text, "compile", "ok")
                pairs.append((self.prompt_ids(tok, c), encode_answer(tok, text)))
        return pairs


    def fix_pairs(self, tok: Any, items: list[Hashable], seed: int, judge: Judge) -> tuple[Pairs, list[str]]:
        """Feedback-then-fix pairs (`feedback_fix_pairs`): a draft with one mistake (`elementwise_chains.corrupt`),
        the protocol's feedback on the gym's verdict of it, a solution as the fix."""
        return feedback_fix_pairs(self, tok, items, seed, judge,
                                  draft=lambda chain, rng: chains.corrupt(chain, rng.choice(chains.applicable(chain)), rng),
                                  fix=chains.solution, feedback_text=self.protocol.feedback)

    def faster_pairs(self, tok: Any, items: list[Hashable], seed: int, judge: Judge) -> tuple[Pairs, list[str]]:
        """Feedback-then-faster pairs (`feedback_fix_pairs` on drafts the gym finds correct): a correct draft
        (in hybrid mode a lazy one, `elementwise_chains.lazy_solution`: one op in C, the rest in PyTorch), the
        protocol's feedback on its verdict (``result: ok 0.6x`` then ``faster:``), and an all-C solution as the
        next answer. Without them a policy meets its first ``faster:`` cue in RL, and later turns rewrite
        kernels that were right."""
        lazy = self.hybrid
        return feedback_fix_pairs(self, tok, items, seed, judge,
                                  draft=lambda chain, rng: chains.lazy_solution(chain, rng) if lazy else chains.solution(chain, rng),
                                  fix=chains.solution, feedback_text=self.protocol.feedback, drafts="correct")


Chain = tuple[str, ...]


def feedback_fix_pairs(family: Any, tok: Any, items: list[Hashable], seed: int, judge: Judge, *,
                       draft: Callable[[Chain, random.Random], str], fix: Callable[[Chain, random.Random], str],
                       feedback_text: Callable[[Any], str],
                       drafts: Literal["wrong", "correct"] = "wrong") -> tuple[Pairs, list[str]]:
    """Feedback-then-answer SFT pairs: per item, a first `draft`, the gym's real verdict of it (`judge`: item,
    answer -> a future verdict) rendered as the next turn's feedback by the family's protocol, and a correct
    answer (`fix`) as the target, so the loss is on that answer only. `drafts="wrong"` (feedback-then-fix)
    keeps the drafts the gym finds wrong (a harmless mistake, e.g. relu dropped before abs, is left out);
    `"correct"` (feedback-then-faster) the ones it finds correct. Also returns the feedback texts
    (`feedback_text`; the pool of a shuffled-feedback control). All drafts are judged before any is awaited."""
    rng = random.Random(seed + (5 if drafts == "wrong" else 7))
    judged = []
    for item in items:
        first = draft(cast(Chain, item), rng)
        judged.append((item, first, judge(item, first)))
    pairs: Pairs = []
    texts: list[str] = []
    for item, first, future in judged:
        result = future.result()
        if (result is not None and result.correct) != (drafts == "correct"):
            continue
        first_ids = encode_answer(tok, first)
        context = family.prompt_ids(tok, item) + first_ids + family.protocol.feedback_ids(tok, result, first_ids)
        pairs.append((context, encode_answer(tok, fix(cast(Chain, item), rng))))
        texts.append(feedback_text(result))
    return pairs, texts


@dataclass
class WarmupPairs:
    """SFT's pairs, and how many of them are feedback-then-fix and feedback-then-faster turns."""

    pairs: Pairs
    fixes: int = 0
    fasters: int = 0


def warmup_pairs(family: Any, tok: Any, items: list[Hashable], seed: int, fix_fraction: float,
                 judge: Judge, faster_fraction: float = 0.0) -> WarmupPairs:
    """SFT's pairs: the family's solutions, plus feedback-then-fix pairs (`fix_pairs`: a wrong first draft, the
    gym's verdict of it, the fix) for a `fix_fraction` share of `items`, and feedback-then-faster pairs
    (`faster_pairs`: a correct draft, its verdict, a solution) for a `faster_fraction` share, each share drawn
    with `seed`. A family without such turns and a positive fraction for them is a ValueError."""
    out = WarmupPairs(family.sft_pairs(tok, items, seed))
    if not items:
        return out
    for fraction, kind, offset, what in ((fix_fraction, "fix", 3, "feedback-then-fix"),
                                         (faster_fraction, "faster", 4, "feedback-then-faster")):
        if fraction <= 0:
            continue
        if not hasattr(family, f"{kind}_pairs"):
            raise ValueError(f"sft.{kind}_fraction={fraction}: task family {family.name!r} has no {what} turns")
        chosen = random.Random(seed + offset).sample(items, max(1, int(len(items) * fraction)))
        more, _ = getattr(family, f"{kind}_pairs")(tok, chosen, seed, judge)
        out.pairs += more
        setattr(out, "fixes" if kind == "fix" else "fasters", len(more))
    return out


def make_family(cfg: TaskConfig, seed: int) -> TaskFamily:
    """The family `cfg.family` names, with its seeded train / held-out split."""
    if cfg.family == "suite":
        from kernelrl.train.suite_family import SuiteFamily

        return SuiteFamily.from_config(cfg, seed)
    if cfg.family == "tiny-nki":
        from kernelrl.train.nki_family import NkiChainFamily

        return NkiChainFamily.from_config(cfg, seed)
    return TinyFamily.from_config(cfg, seed)
