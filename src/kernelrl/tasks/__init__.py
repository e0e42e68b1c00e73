"""Tasks: the `Task` record, KernelBench-compatible loaders, size fitting, shipped suites."""

from kernelrl.tasks.examples import example_path
from kernelrl.tasks.export import default_prompt, export_tasks
from kernelrl.tasks.loaders import TaskLoadError, load_dataset, load_directory, load_task, load_tasks, resize
from kernelrl.tasks.sizing import apply_overrides, estimate_bytes, fit_to_budget, size_constants
from kernelrl.tasks.suites import Solution, load_solutions, solution_path, suite_path
from kernelrl.tasks.task import Task, TaskError

__all__ = [
    "Solution",
    "Task",
    "TaskError",
    "TaskLoadError",
    "apply_overrides",
    "default_prompt",
    "estimate_bytes",
    "example_path",
    "export_tasks",
    "fit_to_budget",
    "load_dataset",
    "load_directory",
    "load_solutions",
    "load_task",
    "load_tasks",
    "resize",
    "size_constants",
    "solution_path",
    "suite_path",
]
