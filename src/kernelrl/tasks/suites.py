"""The shipped task suites (levels 1-3) and their reference solutions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelrl.tasks.task import Task, TaskError

DATA_DIR = Path(__file__).parent / "data"
SUITES_DIR = DATA_DIR / "suites"
SOLUTIONS_DIR = DATA_DIR / "solutions"
# Backends whose tasks form their own suite (same levelN/NN_Name.py layout); the rest use SUITES_DIR.
BACKEND_SUITES = {"nki": DATA_DIR / "suites_nki"}


def suite_root(backend: str = "cpu") -> Path:
    """The suite directory whose tasks `backend`'s reference solutions solve."""
    return BACKEND_SUITES.get(backend, SUITES_DIR)


def suite_path(level: int | None = None, backend: str = "cpu") -> Path:
    """The shipped suite directory (`levelN/` subdirectories), or one level's directory; `backend="nki"`
    selects the NKI suite."""
    root = suite_root(backend)
    if level is None:
        return root
    path = root / f"level{level}"
    if not path.is_dir():
        known = ", ".join(sorted(p.name for p in root.iterdir() if p.is_dir()))
        raise TaskError(f"no shipped suite level {level}; known: {known}")
    return path


def solution_path(task_id: str, backend: str = "cpu") -> Path:
    """The reference solution of a shipped task, e.g. `solution_path("level1/01_ReLU")`."""
    path = SOLUTIONS_DIR / backend / f"{task_id}.py"
    if not path.is_file():
        raise TaskError(f"no {backend} reference solution for {task_id!r}")
    return path


@dataclass
class Solution:
    """A known-good candidate (`ModelNew` source) for a shipped task."""

    task: Task
    source: str
    path: Path
    backend: str = "cpu"


def load_solutions(backend: str = "cpu", level: int | None = None) -> list[Solution]:
    """Every shipped reference solution for `backend`, paired with its task (optionally one level)."""
    from kernelrl.tasks.loaders import load_task

    root = SOLUTIONS_DIR / backend
    if not root.is_dir():
        return []
    pattern = f"level{level}/*.py" if level is not None else "level*/*.py"
    solutions = []
    for path in sorted(root.glob(pattern)):
        task_path = suite_root(backend) / path.parent.name / path.name
        if not task_path.is_file():
            raise TaskError(f"{path}: no shipped task {path.parent.name}/{path.name} for this solution")
        solutions.append(Solution(load_task(task_path), path.read_text(), path, backend))
    return solutions
