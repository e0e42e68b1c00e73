"""Export tasks to a JSONL or Parquet dataset with a `prompt` field, for training pipelines that read datasets.

Prompts belong to the agent layer; `tasks` must not import it, so the caller passes `prompt_fn`.
`default_prompt` is a minimal template for when none is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kernelrl.tasks.task import Task, TaskError

PromptFn = Callable[[Task], str]


def default_prompt(task: Task) -> str:
    """A minimal instruction plus the reference source."""
    return (
        "You are given a PyTorch reference model. Write `class ModelNew(nn.Module)` with the same constructor "
        "arguments and outputs, replacing its operators with custom kernels that are correct and faster.\n\n"
        f"Task {task.id}:\n```python\n{task.source.rstrip()}\n```\n"
    )


def task_record(task: Task, prompt_fn: PromptFn = default_prompt) -> dict[str, Any]:
    """One dataset row: id, level, tags, dtype, source, prompt, and the size overrides (as JSON text)."""
    return {
        "id": task.id,
        "level": task.level,
        "tags": list(task.tags),
        "dtype": task.dtype,
        "source": task.source,
        "prompt": prompt_fn(task),
        "size_overrides": json.dumps({k: list(v) for k, v in task.size_overrides.items()}),
    }


def export_tasks(tasks: Iterable[Task], out: str | Path, prompt_fn: PromptFn = default_prompt) -> int:
    """Write one record per task to `out` (.jsonl or .parquet); returns the number written.

    The records load back with `load_dataset` (metadata in the source's TASK_META wins there).
    """
    out = Path(out)
    records = [task_record(t, prompt_fn) for t in tasks]
    if out.suffix not in (".jsonl", ".parquet"):
        raise TaskError(f"{out}: export format must be .jsonl or .parquet")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".jsonl":
        with out.open("w") as handle:
            for record in records:
                handle.write(json.dumps(record) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), out)
    return len(records)
