"""The gym's `nki` backend: every shipped NKI reference solution is judged `ok` through the real pool
(trust split, candidate process, static checks), and the interpreter's tile rules, wrong results and
host-side compute get their statuses (the broken kernels live in the red-team corpus as `nki_*` cases)."""

from __future__ import annotations

from kernelrl.backend_names import BACKEND_NAMES
from kernelrl.evaluate import Candidate, EvalConfig, EvalPool
from kernelrl.evaluate.backends import BACKENDS, get_backend
from kernelrl.tasks import load_solutions

SOLUTIONS = load_solutions("nki")


def test_every_shipped_nki_solution_is_judged_ok() -> None:
    assert len(SOLUTIONS) >= 15
    config = EvalConfig(correctness_trials=2)
    with EvalPool(workers=2, config=config) as pool:
        futures = [(s, pool.submit(s.task, Candidate(s.path.read_text(), backend="nki", id=s.task.id))) for s in SOLUTIONS]
        results = [(s, f.result()) for s, f in futures]
    failed = {s.task.id: f"{r.status}: {r.error[:200]}" for s, r in results if r.status != "ok"}
    assert failed == {}
    for _, result in results:
        assert any(n.startswith("estimated NKI cost") for n in result.notes), result.notes
        assert result.timing is None or not result.timing.meaningful


def test_backend_is_known_without_a_device() -> None:
    assert set(BACKEND_NAMES) == set(BACKENDS.names())  # the torch-free name list CLIs and configs use
    backend = get_backend("nki")
    assert not backend.has_device() and not backend.timing_meaningful()
    assert "neuronxcc" in backend.extra_imports and "numpy" in backend.denied_imports
