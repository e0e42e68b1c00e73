"""Validity checks for reference tasks: runs, deterministic, output depends on input, finite, timed.

Used by the CI test of the shipped suites and by the synthesis filters. The task's own code runs in
this process: only use it on references we trust (shipped suites, our own synthesized tasks).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelrl.tasks.sizing import size_constants
from kernelrl.tasks.task import Task

# Check names, in the order they run (also the synthesis rejection reasons).
CHECKS = ("loads", "runs", "deterministic", "finite", "input-dependent", "not-constant", "profiles", "runtime")


@dataclass
class TaskCheck:
    """Outcome of `validate_task`: `problems` maps a failed check (see CHECKS) to its message."""

    id: str
    problems: dict[str, str] = field(default_factory=dict)
    runtime_ms: float | None = None
    runtime_basis: str = "measured"  # "measured" (best-of-trials clock) or "estimated" (tasks.cost)
    output_shapes: list[list[int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_problem(self) -> str | None:
        return next(iter(self.problems), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok}


def load_namespace(source: str, name: str = "kernelrl_task_check") -> dict[str, Any]:
    """Execute task source in a fresh namespace (its Model, get_inputs, get_init_inputs)."""
    namespace: dict[str, Any] = {"__name__": name}
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace


def build(namespace: dict[str, Any], seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    init_inputs = namespace["get_init_inputs"]()
    torch.manual_seed(seed)
    return namespace["Model"](*init_inputs)


def make_inputs(namespace: dict[str, Any], seed: int) -> list[Any]:
    import torch

    torch.manual_seed(seed)
    return list(namespace["get_inputs"]())


def flat_tensors(output: Any) -> list[Any]:
    """The tensors in a model output (a tensor, or a tuple/list/dict of them)."""
    import torch

    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, list | tuple):
        return [t for o in output for t in flat_tensors(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in flat_tensors(o)]
    return []


def _same(a: list[Any], b: list[Any]) -> bool:
    import torch

    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b, strict=True))


def time_forward(model: Any, inputs: list[Any], trials: int = 3, budget_s: float = 1.0) -> float:
    """Best-of-trials eager forward time in ms (robust on a loaded machine) (one warm-up call; fewer trials when a call is slow)."""
    import torch

    times = []
    with torch.no_grad():
        model(*inputs)
        deadline = time.perf_counter() + budget_s
        for _ in range(trials):
            start = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - start) * 1e3)
            if time.perf_counter() > deadline:
                break
    return min(times)


def validate_source(
    source: str,
    task_id: str = "<task>",
    seed: int = 0,
    profiles: dict[str, dict[str, int]] | None = None,
    runtime_ms: tuple[float, float] | None = (1.0, 100.0),
    timing_trials: int = 3,
    threads: int | None = 1,
    runtime_basis: str = "measured",
) -> TaskCheck:
    """Run every check on KernelBench-format `source`; stops at the first failed check.

    threads: torch intra-op threads while checking (1, as the evaluator times by default; None: leave).
    runtime_ms: the allowed eager runtime window (None: measure nothing). Checks: the module loads and
    the model runs; two fresh builds with the same seed give bit-identical outputs; outputs are finite;
    different inputs give different outputs; a non-scalar output is not constant; every profile names
    only module-level size constants; the runtime is inside the window.
    runtime_basis: "measured" times the forward (varies with the machine and its load); "estimated" prices
    what it computes (`tasks.cost`), the same on every machine, for filters that must be reproducible.
    """
    import torch

    if runtime_basis not in ("measured", "estimated"):
        raise ValueError(f"runtime_basis must be 'measured' or 'estimated', not {runtime_basis!r}")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _validate(source, task_id, seed, profiles, runtime_ms, timing_trials, runtime_basis)
    finally:
        torch.set_num_threads(previous)


def _validate(
    source: str,
    task_id: str,
    seed: int,
    profiles: dict[str, dict[str, int]] | None,
    runtime_ms: tuple[float, float] | None,
    timing_trials: int,
    runtime_basis: str = "measured",
) -> TaskCheck:
    import torch

    check = TaskCheck(id=task_id)
    try:
        namespace = load_namespace(source)
    except Exception as exc:
        check.problems["loads"] = f"{type(exc).__name__}: {exc}"
        return check
    try:
        with torch.no_grad():
            model = build(namespace, seed)
            inputs = make_inputs(namespace, seed + 1)
            first = flat_tensors(model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
            again_model, again_inputs = build(namespace, seed), make_inputs(namespace, seed + 1)
            torch.manual_seed(seed + 7)  # a model that draws random numbers in forward is not deterministic
            again = flat_tensors(again_model(*again_inputs))
            other = flat_tensors(build(namespace, seed)(*make_inputs(namespace, seed + 2)))
    except Exception as exc:
        check.problems["runs"] = f"{type(exc).__name__}: {exc}"
        return check
    if not first:
        check.problems["runs"] = "the model returned no tensor"
        return check
    check.output_shapes = [list(t.shape) for t in first]
    if not _same(first, again):
        check.problems["deterministic"] = "two runs with the same seed gave different outputs"
    elif not all(bool(torch.isfinite(t).all()) for t in first if t.is_floating_point() or t.is_complex()):
        check.problems["finite"] = "the output contains NaN or Inf"
    elif _same(first, other):
        check.problems["input-dependent"] = "different inputs gave identical outputs"
    elif all(t.numel() > 1 and bool((t == t.flatten()[0]).all()) for t in first):
        check.problems["not-constant"] = "every element of the output has the same value"
    else:
        known = size_constants(source)
        bad = {p: sorted(set(sizes) - set(known)) for p, sizes in (profiles or {}).items() if set(sizes) - set(known)}
        if bad:
            check.problems["profiles"] = f"profiles name unknown size constants: {bad}"
    if check.ok and runtime_ms is not None:
        check.runtime_basis = runtime_basis
        if runtime_basis == "estimated":
            from kernelrl.tasks.cost import count_work

            check.runtime_ms = count_work(model, inputs).estimated_ms
        else:
            check.runtime_ms = time_forward(model, inputs, timing_trials)
        low, high = runtime_ms
        if not low <= check.runtime_ms <= high:
            check.problems["runtime"] = f"{runtime_basis} eager runtime {check.runtime_ms:.2f} ms outside [{low}, {high}] ms"
    return check


def validate_task(
    task: Task, runtime_ms: tuple[float, float] | None = (1.0, 100.0), timing_trials: int = 3, threads: int | None = 1
) -> TaskCheck:
    """`validate_source` for a loaded Task (its seed and profiles)."""
    return validate_source(task.source, task.id, task.seed, task.profiles, runtime_ms, timing_trials, threads)
