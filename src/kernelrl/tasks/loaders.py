"""Load tasks: one file, a directory (KernelBench layout `levelN/NN_Name.py`), or a JSONL/Parquet dataset."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kernelrl.tasks.metadata import (
    check_contract,
    metadata_from_sidecar,
    metadata_from_source,
    parse_module,
    validate_metadata,
)
from kernelrl.tasks.sizing import fit_to_budget, scale_sizes, size_constants, with_overrides
from kernelrl.tasks.task import Task, TaskError

SOURCE_FIELDS = ("code", "source", "reference", "ref_code", "reference_code", "pytorch_code", "module")
ID_FIELDS = ("id", "task_id", "problem_id", "name")
LEVEL_DIR = re.compile(r"^level[_-]?(\d+)$", re.I)


def task_from_source(
    source: str, task_id: str, where: str, level: int | None = None, extra: dict[str, Any] | None = None
) -> Task:
    """Validate KernelBench-format `source` and build a Task; metadata in the source wins over `extra`."""
    tree = parse_module(source, where)
    check_contract(tree, where)
    meta = validate_metadata({**(extra or {}), **metadata_from_source(tree, where)}, where)
    meta.setdefault("id", task_id)
    if level is not None:
        meta.setdefault("level", level)
    return Task(source=source, path=where if Path(where).exists() else None, **meta)


def load_task(path: str | Path) -> Task:
    """One task file; metadata from `TASK_META` in the source or a sidecar `<name>.json|yaml`."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such task file")
    try:
        source = path.read_text()
    except UnicodeDecodeError:
        raise TaskError(f"{path}: not UTF-8 text") from None
    level_match = LEVEL_DIR.match(path.parent.name)
    level = int(level_match.group(1)) if level_match else None
    task_id = f"{path.parent.name}/{path.stem}" if level_match else path.stem
    return task_from_source(source, task_id, str(path), level, metadata_from_sidecar(path))


def _numeric_prefix(path: Path) -> tuple[int, str]:
    match = re.match(r"^(\d+)", path.name)
    return (int(match.group(1)) if match else 10**9, path.name)


def _task_files(directory: Path) -> list[Path]:
    return sorted(
        (p for p in directory.glob("*.py") if not p.name.startswith(("_", "."))), key=_numeric_prefix
    )


def load_directory(directory: str | Path) -> list[Task]:
    """A suite directory: `levelN/` subdirectories (KernelBench layout, loaded unmodified) or flat files."""
    directory = Path(directory)
    files = _directory_files(directory)
    tasks, failures = [], []
    for f in files:
        try:
            tasks.append(load_task(f))
        except TaskError as exc:
            failures.append((f"{f.parent.name}/{f.stem}" if LEVEL_DIR.match(f.parent.name) else f.stem, str(exc)))
    if failures:
        raise TaskLoadError(tasks, failures)
    return tasks


def _directory_files(directory: Path) -> list[Path]:
    level_dirs = sorted(
        (d for d in directory.iterdir() if d.is_dir() and LEVEL_DIR.match(d.name)),
        key=lambda d: int(LEVEL_DIR.match(d.name).group(1)),  # type: ignore[union-attr]
    )
    files = [f for d in level_dirs for f in _task_files(d)] if level_dirs else _task_files(directory)
    if not files:
        raise TaskError(f"{directory}: no task files (*.py) found, nor levelN/ subdirectories")
    return files


class TaskLoadError(TaskError):
    """Some tasks failed to load or size: `loaded` holds the good ones, `failures` (task, message) the
    rest; the message groups the failures by kind."""

    def __init__(self, loaded: list[Task], failures: list[tuple[str, str]]) -> None:
        self.loaded, self.failures = loaded, failures
        groups: dict[str, list[str]] = {}
        for task_id, message in failures:
            groups.setdefault(failure_kind(message), []).append(task_id)
        lines = [f"{len(failures)} of {len(loaded) + len(failures)} tasks failed:"]
        for kind, ids in sorted(groups.items(), key=lambda item: -len(item[1])):
            shown = ", ".join(ids[:5]) + (f", ... ({len(ids) - 5} more)" if len(ids) > 5 else "")
            lines.append(f"  {kind} ({len(ids)}): {shown}")
        lines.extend(f"  - {task_id}: {message}" for task_id, message in failures[:20])
        super().__init__("\n".join(lines))


def failure_kind(message: str) -> str:
    """What went wrong, without the task's name, sizes or numbers: failures of one kind group together."""
    text = message.split(": ", 1)[1] if ": " in message else message
    text = re.sub(r"\s*\([^()]*\)", "", text)
    text = re.split(r": [A-Z]\w*(?:Error|Exception)\b", text)[0]
    return re.sub(r"\d+(?:\.\d+)?", "N", text).strip().rstrip(":") or "failed"


def _records(path: Path) -> Iterable[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
        return
    with path.open() as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
            if not isinstance(record, dict):
                raise TaskError(f"{path}:{number}: each line must be a JSON object")
            yield record


def load_dataset(path: str | Path, source_field: str | None = None) -> list[Task]:
    """A JSONL or Parquet dataset with the task source in a field (auto-detected unless named)."""
    path = Path(path)
    tasks = []
    for index, record in enumerate(_records(path)):
        where = f"{path}[{index}]"
        field_name = source_field or next((f for f in SOURCE_FIELDS if f in record), None)
        if field_name is None or not isinstance(record.get(field_name), str):
            raise TaskError(f"{where}: no source field; looked for {source_field or ', '.join(SOURCE_FIELDS)}")
        task_id = next((str(record[f]) for f in ID_FIELDS if f in record), f"{path.stem}/{index}")
        level = record.get("level")
        extra = {k: record[k] for k in ("dtype", "rtol", "atol", "seed", "tags", "notes", "profiles") if k in record}
        tasks.append(task_from_source(record[field_name], task_id, where, int(level) if level else None, extra))
    if not tasks:
        raise TaskError(f"{path}: dataset is empty")
    return tasks


def load_tasks(
    path: str | Path,
    overrides: dict[str, int] | None = None,
    scale: float | None = None,
    max_bytes: int | None = None,
    profile: str | None = None,
    progress: Callable[[Task], None] | None = None,
) -> list[Task]:
    """Load a file, directory or dataset, then apply a size profile (e.g. "gpu"; an error if no task
    defines it), size overrides (a name no task has is an error), a scale factor, or a memory budget (in
    that order). `progress` is called with each task once it is sized. Every task is tried: failures
    (a file that does not load, a task that cannot fit or no longer runs shrunk) raise one
    `TaskLoadError` at the end that groups them and carries the tasks that loaded."""
    path = Path(path)
    failed: list[tuple[str, str]] = []  # (task, message) of files that did not load: reported with the rest
    if path.is_dir():
        try:
            tasks = load_directory(path)
        except TaskLoadError as exc:
            tasks, failed = exc.loaded, exc.failures
    elif path.suffix in (".jsonl", ".parquet"):
        tasks = load_dataset(path)
    elif path.suffix == ".py":
        tasks = [load_task(path)]
    elif not path.exists():
        raise TaskError(f"{path}: no such file or directory")
    else:
        raise TaskError(f"{path}: unknown task format (expected .py, .jsonl, .parquet or a directory)")
    if profile is not None and not any(profile in t.profiles for t in tasks):
        raise TaskError(f"{path}: no task defines size profile {profile!r}")
    if overrides:
        matched = {name for t in tasks for name in size_constants(t.source)}
        unmatched = sorted(set(overrides) - matched)
        if unmatched:
            raise TaskError(f"{path}: size override {', '.join(unmatched)} matches no size constant of any task")
    resized, failures = [], list(failed)
    for task in tasks:
        try:
            resized.append(resize(task, overrides, scale, max_bytes, profile))
        except TaskError as exc:
            failures.append((task.id, str(exc)))
        if progress is not None:
            progress(task)
    if failures:
        raise TaskLoadError(resized, failures)
    return resized


def resize(
    task: Task,
    overrides: dict[str, int] | None = None,
    scale: float | None = None,
    max_bytes: int | None = None,
    profile: str | None = None,
) -> Task:
    """Apply a named size profile from the task's metadata (tasks without it are left as they are),
    then explicit overrides (only those the task has), then a scale factor, then a memory budget."""
    if profile is not None and profile in task.profiles:
        known = size_constants(task.source)
        task = with_overrides(task, {k: v for k, v in task.profiles[profile].items() if k in known})
    if overrides:
        present = {k: v for k, v in overrides.items() if k in size_constants(task.source)}
        task = with_overrides(task, present)
    if scale is not None and scale != 1.0:
        task = with_overrides(task, scale_sizes(task.source, scale))
    if max_bytes is not None:
        task = fit_to_budget(task, max_bytes)
    return task
