"""Task loading: single files, KernelBench layout, JSONL/Parquet datasets, metadata, size fitting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelrl.tasks import (
    TaskError,
    estimate_bytes,
    example_path,
    load_dataset,
    load_task,
    load_tasks,
    size_constants,
)

KB_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4096
dim = 393216


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed
'''


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_kernelbench_layout_loads_unmodified(tmp_path: Path) -> None:
    write(tmp_path / "level1" / "19_ReLU.py", KB_TASK)
    write(tmp_path / "level1" / "2_Other.py", KB_TASK.replace("relu", "sigmoid"))
    write(tmp_path / "level2" / "1_Fused.py", KB_TASK)
    tasks = load_tasks(tmp_path)
    assert [t.id for t in tasks] == ["level1/2_Other", "level1/19_ReLU", "level2/1_Fused"]
    assert [t.level for t in tasks] == [1, 1, 2]
    assert tasks[1].tolerance == (1e-4, 1e-4)


def test_metadata_from_source_and_sidecar(tmp_path: Path) -> None:
    task = load_task(example_path("scale_bias_relu.py"))
    assert (task.id, task.level, task.tags) == ("example/scale_bias_relu", 1, ["elementwise", "fusion"])
    path = write(tmp_path / "half.py", KB_TASK)
    write(tmp_path / "half.json", json.dumps({"dtype": "float16", "seed": 7, "notes": "fp16"}))
    task = load_task(path)
    assert (task.dtype, task.seed, task.tolerance) == ("float16", 7, (1e-2, 1e-2))


def test_datasets_jsonl_and_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [{"task_id": "a", "code": KB_TASK, "level": 1}, {"task_id": "b", "code": KB_TASK, "level": 2}]
    jsonl = tmp_path / "tasks.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert [(t.id, t.level) for t in load_dataset(jsonl)] == [("a", 1), ("b", 2)]
    parquet = tmp_path / "tasks.parquet"
    pq.write_table(pa.Table.from_pylist(records), parquet)
    assert [t.id for t in load_tasks(parquet)] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("def get_inputs(:\n", "syntax error at line 1"),
        ("import torch\ndef get_inputs():\n    return []\n", "missing Model, get_init_inputs"),
        (KB_TASK + "\nTASK_META = {'dtype': 'float8'}\n", "dtype 'float8'"),
        (KB_TASK + "\nTASK_META = {'colour': 1}\n", "unknown metadata keys"),
    ],
)
def test_malformed_task_names_file_and_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path / "bad.py", text)
    with pytest.raises(TaskError) as info:
        load_task(path)
    assert str(path) in str(info.value) and problem in str(info.value)


def test_malformed_dataset_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"code": 1}\n')
    with pytest.raises(TaskError, match=r"d.jsonl\[0\]: no source field"):
        load_dataset(path)
    path.write_text("{not json\n")
    with pytest.raises(TaskError, match=r"d.jsonl:1: invalid JSON"):
        load_dataset(path)


def test_size_overrides_are_applied_and_recorded(tmp_path: Path) -> None:
    path = write(tmp_path / "relu.py", KB_TASK)
    with pytest.raises(TaskError, match="size override not_there matches no size constant"):
        load_tasks(path, overrides={"batch_size": 8, "not_there": 3})
    task = load_tasks(path, overrides={"batch_size": 8})[0]
    assert size_constants(task.source)["batch_size"][0] == 8
    assert task.size_overrides == {"batch_size": (4096, 8)}
    assert "batch_size = 8\n" in task.source and "dim = 393216\n" in task.source


def test_fit_to_budget_shrinks_gpu_sized_task(tmp_path: Path) -> None:
    path = write(tmp_path / "relu.py", KB_TASK)
    original = estimate_bytes(KB_TASK)
    assert original == 2 * 4096 * 393216 * 4  # input + output, measured on the meta device
    task = load_tasks(path, max_bytes=16 * 2**20)[0]
    assert estimate_bytes(task.source) <= 16 * 2**20
    assert set(task.size_overrides) <= {"batch_size", "dim"} and task.size_overrides
    scaled = load_tasks(path, scale=0.5)[0]
    assert scaled.size_overrides == {"batch_size": (4096, 2048), "dim": (393216, 196608)}
