"""Export of suites to JSONL/Parquet datasets with a prompt field, and loading them back."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelrl.cli import main
from kernelrl.tasks import Task, TaskError, default_prompt, export_tasks, load_dataset, load_tasks, suite_path


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_export_round_trips_with_prompts(tmp_path: Path, suffix: str) -> None:
    tasks = load_tasks(suite_path(3))
    out = tmp_path / f"level3{suffix}"
    assert export_tasks(tasks, out, prompt_fn=lambda t: f"PROMPT for {t.id}") == len(tasks)
    again = load_dataset(out)
    assert [t.id for t in again] == [t.id for t in tasks]
    assert [t.source for t in again] == [t.source for t in tasks]
    assert all(a.level == 3 and a.tags == t.tags and a.profiles == t.profiles for a, t in zip(again, tasks, strict=True))
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(out).to_pylist()
        assert rows[0]["prompt"] == f"PROMPT for {tasks[0].id}"
        assert set(rows[0]) == {"id", "level", "tags", "dtype", "source", "prompt", "size_overrides"}


def test_default_prompt_and_bad_format(tmp_path: Path) -> None:
    task = load_tasks(suite_path(1) / "01_ReLU.py")[0]
    prompt = default_prompt(task)
    assert "ModelNew" in prompt and task.source.strip() in prompt
    with pytest.raises(TaskError, match=r"\.jsonl or \.parquet"):
        export_tasks([task], tmp_path / "x.csv")


def test_export_cli_applies_gpu_profile(tmp_path: Path) -> None:
    out = tmp_path / "gpu.jsonl"
    assert main(["tasks", "export", str(suite_path(2)), "--out", str(out), "--profile", "gpu"]) == 0
    import json

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == len(load_tasks(suite_path(2)))
    first = records[0]
    assert json.loads(first["size_overrides"]) == {"batch_size": [512, 8192], "in_features": [512, 4096],
                                                    "out_features": [512, 4096]}
    assert "batch_size = 8192" in first["source"] and first["id"] in first["prompt"]
    assert isinstance(load_dataset(out)[0], Task)
    assert main(["tasks", "export", str(tmp_path / "nothing"), "--out", str(out)]) == 2
