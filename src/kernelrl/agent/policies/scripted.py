"""A policy that replays fixed answers: for tests and for re-scoring saved runs."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

from kernelrl.agent.policies.base import POLICIES, Completion, PolicyError, RequestContext, ToolCall
from kernelrl.agent.records import Usage

Answer = str | dict[str, Any]  # a text, or {"content": ..., "tool_calls": [{"name", "arguments"}]}


def _safe(task_id: str) -> str:
    return task_id.replace("/", "__")


@POLICIES.register("scripted")
class ScriptedPolicy:
    """Replays answers in order for each (task, sample) episode.

    `answers` is a list (the same script for every task), a dict task id -> list, or a path: a
    directory holding `<task id with / as __>/<n>.*` files (or `<task>.*` for one answer, or the
    shipped solutions' `<level>/<name>.py` for task `level/name`), a
    text/python file (one answer for everything), or a JSONL file of earlier trajectories (a
    `kernelrl bench` results file) whose responses are replayed per task and sample. When a script
    runs out, its last answer repeats.
    """

    supports_tools = True

    def __init__(self, answers: list[Answer] | dict[str, list[Answer]] | str | Path, name: str = "scripted") -> None:
        self.name = name
        self._by_task: dict[str, list[Answer]] = {}
        self._by_sample: dict[tuple[str, int], list[Answer]] = {}
        self._default: list[Answer] = []
        if isinstance(answers, str | Path):
            self._load(Path(answers))
        elif isinstance(answers, dict):
            self._by_task = {k: list(v) for k, v in answers.items()}
        else:
            self._default = list(answers)
        self._calls: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def _load(self, path: Path) -> None:
        if path.is_dir():
            for entry in sorted(path.iterdir()):
                if entry.is_dir():
                    files = sorted((f for f in entry.iterdir() if f.is_file()), key=lambda f: (len(f.stem), f.stem))
                    if all(f.stem.isdigit() for f in files):  # <task>/<n>.*: one task's answers in order
                        self._by_task[entry.name] = [f.read_text() for f in files]
                    else:  # <level>/<name>.py, the shipped solutions' layout: one answer for task "level/name"
                        for f in files:
                            self._by_task[f"{entry.name}/{f.stem}"] = [f.read_text()]
                elif entry.is_file():
                    self._by_task[entry.stem] = [entry.read_text()]
        elif path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                if line.strip():
                    record = json.loads(line)
                    key = (_safe(record["task_id"]), int(record.get("sample", 0)))
                    self._by_sample[key] = [t["response"] for t in record.get("turns", [])]
        elif path.is_file():
            self._default = [path.read_text()]
        else:
            raise FileNotFoundError(f"{path}: no such answers file or directory")

    def script_for(self, task_id: str, sample: int) -> list[Answer]:
        safe = _safe(task_id)
        if (safe, sample) in self._by_sample:
            return self._by_sample[(safe, sample)]
        return self._by_task.get(task_id) or self._by_task.get(safe) or self._default

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
        context: RequestContext | None = None,
    ) -> Completion:
        context = context or RequestContext()
        script = self.script_for(context.task_id, context.sample)
        if not script:
            raise PolicyError(f"scripted policy has no answers for task {context.task_id!r}")
        with self._lock:
            key = (context.task_id, context.sample)
            index = self._calls.get(key, 0)
            self._calls[key] = index + 1
        answer = script[min(index, len(script) - 1)]
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        if isinstance(answer, str):
            answer = {"content": answer}
        calls = [
            ToolCall(id=f"call_{next(self._ids)}", name=c["name"],
                     arguments=c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]))
            for c in answer.get("tool_calls") or []
        ]
        text = answer.get("content") or ""
        usage = Usage(prompt_tokens=(prompt_chars + 3) // 4, completion_tokens=(len(text) + 3) // 4, calls=1)
        return Completion(text=text, usage=usage, tool_calls=calls, finish_reason="tool_calls" if calls else "stop")

    def calls(self, task_id: str, sample: int = 0) -> int:
        """How many times the episode (task, sample) asked for an answer."""
        return self._calls.get((task_id, sample), 0)
