"""The NKI task suite loads with the project's loader; every shipped NKI reference solution runs
through the interpreter and matches its task's reference; the prompt rules state the limits."""

from __future__ import annotations

import pytest
import torch

from kernelrl.nki import collect_costs, load_candidate
from kernelrl.nki.prompt import NKI_RULES
from kernelrl.tasks import load_solutions, load_tasks, solution_path, suite_path
from kernelrl.tasks.validate import build, load_namespace, make_inputs

SOLUTIONS = load_solutions("nki")


def test_suite_loads_with_three_levels() -> None:
    tasks = load_tasks(suite_path(backend="nki"))
    assert len(tasks) >= 30
    assert {t.level for t in tasks} == {1, 2, 3}
    ids = [t.id for t in tasks]
    assert len(set(ids)) == len(ids)
    for task in tasks:
        assert task.id.startswith(f"level{task.level}/") and task.tags
        namespace = load_namespace(task.source)
        output = build(namespace, 0)(*make_inputs(namespace, 0))
        assert isinstance(output, torch.Tensor), task.id


def test_solutions_are_found_like_cpu_ones() -> None:
    assert len(SOLUTIONS) >= 15 and {s.task.level for s in SOLUTIONS} == {1, 2, 3}
    path = solution_path("level2/04_Softmax", backend="nki")
    assert path.parent.parent.name == "nki" and "@nki.jit" in path.read_text()


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[s.task.id for s in SOLUTIONS])
def test_solution_matches_reference_through_interpreter(solution) -> None:  # type: ignore[no-untyped-def]
    task = solution.task
    reference = load_namespace(task.source)
    inputs = make_inputs(reference, 7)
    expected = build(reference, 7)(*inputs)
    candidate = load_candidate(solution.source, str(solution.path))
    model = candidate["ModelNew"](*reference["get_init_inputs"]())
    with collect_costs() as cost:
        got = model(*[x.clone() for x in inputs])
    rtol, atol = task.tolerance
    assert isinstance(got, torch.Tensor) and got.shape == expected.shape
    assert torch.allclose(got.float(), expected, rtol=rtol, atol=atol), (got - expected).abs().max()
    assert cost.kernels >= 1 and cost.estimated_total_us > 0 and cost.instructions["dma"] >= 2
    if "matmul" in task.tags:
        assert cost.instructions["tensor"] >= 1


def test_prompt_rules_state_the_limits() -> None:
    for needle in ("128", "512", "192 KiB", "8 banks", "2 KiB", "gemm_stationary_fmax", "gemm_moving_fmax",
                   "psum_fmax", "nl.load", "nl.store", "nl.shared_hbm", "mask=", "float32", "@nki.jit"):
        assert needle in NKI_RULES, needle
