"""`kernelrl bench --backend nki`: the NKI prompt rules reach the policy, and the shipped NKI solutions,
replayed by the scripted policy from their `<level>/<name>.py` layout, are judged correct by the gym."""

from __future__ import annotations

import json
from pathlib import Path

from kernelrl.agent.prompts import PromptConfig, initial_messages
from kernelrl.cli import main
from kernelrl.tasks import load_solutions, load_tasks, suite_path
from kernelrl.tasks.suites import SOLUTIONS_DIR


def test_bench_runs_the_nki_suite_with_its_solutions(tmp_path: Path) -> None:
    level1 = suite_path(1, backend="nki")
    solved = {s.task.id for s in load_solutions("nki", level=1)}
    code = main(["bench", "--backend", "nki", "--suite", str(level1), "--policy", "scripted", "--answers",
                 str(SOLUTIONS_DIR / "nki"), "--out", str(tmp_path / "run"), "--no-progress", "--trials", "2"])
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(records) == len(load_tasks(level1)) and solved
    correct = {r["task_id"] for r in records if r["turns"] and r["turns"][-1]["result"]["status"] == "ok"}
    assert correct == solved


def test_nki_prompt_carries_the_tile_rules() -> None:
    task = load_tasks(suite_path(1, backend="nki"))[0]
    text = "\n".join(m["content"] for m in initial_messages(task, PromptConfig(backend="nki")))
    assert "nl.tile_size.pmax" in text and "psum" in text.lower() and "@nki.jit" in text


def test_a_suite_family_on_nki_trains_on_the_nki_suite() -> None:
    """`task.family=suite task.backend=nki task.suite=level1`: NKI tasks, NKI prompts, NKI solutions as SFT pairs."""
    from kernelrl.train.config import TaskConfig
    from kernelrl.train.suite_family import SuiteFamily

    family = SuiteFamily.from_config(TaskConfig(family="suite", backend="nki", suite="level1", n_heldout=4), seed=0)
    ids = {t.id for t in load_tasks(suite_path(1, backend="nki"))}
    assert set(family.tasks) == ids
    assert family.solutions and all("@nki.jit" in source for source in family.solutions.values())
