"""Real kernel tasks for the trainer: a shipped suite (``level1``..``level3``) or a KernelBench directory /
JSONL / Parquet dataset (`kernelrl.tasks` loaders), evaluated on one backend.

Prompts are the agent's (`kernelrl.agent.prompts`), rendered with the tokenizer's chat template (or the
agent's plain fallback format); code comes out of a response with `kernelrl.agent.extract.extract_code`;
the next turn of a multi-turn episode is the gym's own feedback (`kernelrl.agent.feedback`), cut to a
token budget. SFT pairs are the shipped reference solutions of the train tasks for the backend.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from kernelrl.agent.episode_protocol import AgentProtocol
from kernelrl.agent.policies.local import fallback_chat_format
from kernelrl.agent.prompts import PromptConfig
from kernelrl.evaluate import Candidate
from kernelrl.tasks import load_solutions, load_tasks, resize, suite_path
from kernelrl.tasks.task import Task
from kernelrl.train.config import TaskConfig
from kernelrl.train.model import encode_answer
from kernelrl.train.task_family import Pairs


def load_suite(spec: str, backend: str = "cpu") -> list[Task]:
    """Tasks of a shipped suite name (``level1``: the backend's own suite, e.g. the NKI one for ``nki``) or a
    path (directory, ``.jsonl``, ``.parquet``, ``.py``)."""
    name = spec.strip().lower()
    if name.startswith("level") and name[5:].isdigit() and not Path(spec).exists():
        return load_tasks(suite_path(int(name[5:]), backend=backend))
    return load_tasks(spec)


def answer_text(source: str) -> str:
    """A model answer holding `source` the way the prompt's output contract asks for it."""
    return f"```python\n{source.strip()}\n```"


class SuiteFamily:
    """Tasks from a suite, split into train and held-out items (task ids) by a seeded shuffle."""

    name = "suite"

    def __init__(self, tasks: list[Task], *, backend: str = "cpu", n_heldout: int = 16, n_train: int | None = None,
                 seed: int = 0, prompt_rules: bool = True, feedback_mode: str = "text", feedback_tokens: int = 512,
                 solutions: dict[str, str] | None = None) -> None:
        if len(tasks) <= n_heldout:
            raise ValueError(f"suite has {len(tasks)} tasks after filtering; need more than task.n_heldout={n_heldout}")
        self.backend, self.feedback_mode, self.feedback_tokens = backend, feedback_mode, feedback_tokens
        self.prompt_config = PromptConfig(backend=backend, include_rules=prompt_rules)
        self.protocol = AgentProtocol(prompt=self.prompt_config, feedback_mode=feedback_mode,
                                      feedback_tokens=feedback_tokens)
        self.tasks = {t.id: t for t in tasks}
        ids = sorted(self.tasks)
        random.Random(seed).shuffle(ids)
        self.heldout_items: list[Hashable] = list(ids[:n_heldout])
        self.train_items: list[Hashable] = list(ids[n_heldout:][:n_train])
        self.solutions = solutions or {}
        self._prompts: dict[tuple[int, Hashable], list[int]] = {}

    @classmethod
    def from_config(cls, cfg: TaskConfig, seed: int) -> SuiteFamily:
        """Load `cfg.suite`, keep `task_ids` / `tags` (any of them), resize, pair shipped solutions."""
        raw = load_suite(cfg.suite, cfg.backend)
        if cfg.task_ids:
            missing = set(cfg.task_ids) - {t.id for t in raw}
            if missing:
                raise ValueError(f"task.task_ids not in suite {cfg.suite!r}: {sorted(missing)}")
            raw = [t for t in raw if t.id in set(cfg.task_ids)]
        if cfg.tags:
            raw = [t for t in raw if set(t.tags) & set(cfg.tags)]
        # a shipped solution fits a task only if the task is the shipped one (same source before resizing)
        shipped = {s.task.id: s for s in load_solutions(cfg.backend)}
        solutions = {t.id: shipped[t.id].source for t in raw
                     if t.id in shipped and shipped[t.id].task.source == t.source}
        tasks = [resize(t, scale=cfg.scale, max_bytes=cfg.max_bytes, profile=cfg.profile) for t in raw]
        return cls(tasks, backend=cfg.backend, n_heldout=cfg.n_heldout, n_train=cfg.n_train, seed=seed,
                   prompt_rules=cfg.prompt_rules, feedback_mode=cfg.feedback_mode,
                   feedback_tokens=cfg.feedback_tokens, solutions=solutions)

    def task(self, item: Hashable) -> Task:
        return self.tasks[item]  # type: ignore[index]

    def messages(self, item: Hashable) -> list[dict[str, str]]:
        return self.protocol.opening(self.task(item))

    def tokenizer_corpus(self) -> list[str]:
        texts = [fallback_chat_format(self.messages(i)) for i in sorted(self.tasks)]
        return texts + [answer_text(s) for s in self.solutions.values()]

    def prompt_ids(self, tok: Any, item: Hashable) -> list[int]:
        key = (id(tok), item)
        if key not in self._prompts:
            self._prompts[key] = self.protocol.opening_ids(tok, self.task(item))
        return self._prompts[key]

    def candidate(self, item: Hashable, text: str) -> Candidate | None:
        code = self.protocol.extract(text)
        return Candidate(code, self.backend) if code is not None and code.strip() else None

    def sft_pairs(self, tok: Any, items: list[Hashable], seed: int) -> Pairs:
        """The shipped reference solution of every item that has one for the backend."""
        return [(self.prompt_ids(tok, i), encode_answer(tok, answer_text(self.solutions[i])))  # type: ignore[index]
                for i in items if i in self.solutions]
