"""Override or scale a task's module-level integer size constants (e.g. `batch_size = 4096`).

GPU-sized tasks do not fit a CPU. The loader can set constants explicitly, scale them, or shrink
the largest ones until the task's estimated memory (inputs, weights and output, measured on
torch's `meta` device, so nothing is allocated) fits a budget.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from kernelrl.tasks.metadata import parse_module
from kernelrl.tasks.task import Task, TaskError

# Constants that are shape *parameters* rather than sizes: never scaled automatically.
NOT_SIZES = {"kernel_size", "stride", "padding", "dilation", "groups", "num_groups", "axis", "seed"}
MIN_SCALABLE = 16  # constants below this are left alone when scaling


def size_constants(source: str) -> dict[str, tuple[int, ast.Constant]]:
    """Module-level `NAME = <int literal>` assignments: name -> (value, literal node)."""
    found: dict[str, tuple[int, ast.Constant]] = {}
    for node in parse_module(source, "<task>").body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            found[node.targets[0].id] = (node.value.value, node.value)
    return found


def apply_overrides(source: str, overrides: dict[str, int]) -> tuple[str, dict[str, tuple[int, int]]]:
    """Rewrite the literals of the named constants; returns the new source and name -> (old, new)."""
    constants = size_constants(source)
    unknown = set(overrides) - set(constants)
    if unknown:
        raise TaskError(
            f"cannot override {sorted(unknown)}: not module-level integer constants "
            f"(available: {', '.join(sorted(constants)) or 'none'})"
        )
    lines = source.splitlines(keepends=True)
    changed: dict[str, tuple[int, int]] = {}
    # Replace from the bottom up so earlier column offsets stay valid.
    for name in sorted(overrides, key=lambda n: (constants[n][1].lineno, constants[n][1].col_offset), reverse=True):
        old, node = constants[name]
        new = int(overrides[name])
        if new < 1:
            raise TaskError(f"size override {name}={new} must be >= 1")
        if old == new:
            continue
        row = node.lineno - 1
        line = lines[row]
        start, end = _byte_to_char(line, node.col_offset), _byte_to_char(line, node.end_col_offset or 0)
        lines[row] = line[:start] + str(new) + line[end:]
        changed[name] = (old, new)
    return "".join(lines), changed


def _byte_to_char(line: str, byte_offset: int) -> int:
    return len(line.encode()[:byte_offset].decode(errors="ignore"))


def scale_sizes(source: str, factor: float) -> dict[str, int]:
    """New values for every scalable size constant multiplied by `factor` (at least 1)."""
    return {
        name: max(1, round(value * factor))
        for name, (value, _) in size_constants(source).items()
        if name not in NOT_SIZES and value >= MIN_SCALABLE
    }


def estimate_bytes(source: str) -> int:
    """Bytes of inputs + weights + output of the task, measured on the meta device (nothing allocated)."""
    import torch

    namespace: dict[str, Any] = {"__name__": "kernelrl_task_estimate"}
    exec(compile(source, "<task>", "exec"), namespace)
    with torch.device("meta"):
        inputs = namespace["get_inputs"]()
        model = namespace["Model"](*namespace["get_init_inputs"]())
        total = _tensor_bytes(inputs) + sum(p.numel() * p.element_size() for p in model.parameters())
        try:
            total += _tensor_bytes(model(*inputs))
        except Exception:  # an op without a meta kernel: inputs and weights are still a fair estimate
            pass
    return total


def _tensor_bytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, list | tuple):
        return sum(_tensor_bytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_tensor_bytes(o) for o in obj.values())
    return 0


def fit_to_budget(task: Task, max_bytes: int, max_rounds: int = 40) -> Task:
    """Halve the largest scalable size constant until the task's estimated memory fits `max_bytes`."""
    source = task.source
    overrides: dict[str, int] = {}
    for _ in range(max_rounds):
        if estimate_bytes(source) <= max_bytes:
            break
        constants = {
            n: v for n, (v, _) in size_constants(source).items() if n not in NOT_SIZES and v >= MIN_SCALABLE
        }
        if not constants:
            raise TaskError(f"{task.id}: does not fit {max_bytes} bytes and has no size constants left to shrink")
        name = max(constants, key=lambda n: constants[n])
        overrides[name] = max(1, math.ceil(constants[name] / 2))
        source, _ = apply_overrides(source, {name: overrides[name]})
    else:
        raise TaskError(f"{task.id}: could not fit {max_bytes} bytes within {max_rounds} halvings")
    return with_overrides(task, overrides)


def with_overrides(task: Task, overrides: dict[str, int]) -> Task:
    """A copy of `task` with constants overridden; `size_overrides` keeps the original values."""
    source, changed = apply_overrides(task.source, overrides)
    merged = dict(task.size_overrides)
    for name, (old, new) in changed.items():
        merged[name] = (merged[name][0] if name in merged else old, new)
    data = task.to_dict() | {"source": source}
    result = Task.from_dict(data)
    result.size_overrides = merged
    return result
