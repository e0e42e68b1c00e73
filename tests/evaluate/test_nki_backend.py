"""The gym's `nki` backend: every shipped NKI reference solution is judged `ok` through the real pool
(trust split, candidate process, static checks), and the interpreter's tile rules, wrong results and
host-side compute get their statuses (the broken kernels live in the red-team corpus as `nki_*` cases)."""

from __future__ import annotations

import os

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
    assert "neuronxcc" in backend.extra_imports and "numpy" not in backend.denied_imports


STAND_IN_SDK = {
    "neuronxcc/__init__.py": '"""A stand-in for the Neuron SDK (not installable here): only the API the gym calls."""\n',
    "neuronxcc/nki/__init__.py": '''
import contextvars
import sys

import numpy as np

from kernelrl.nki import interpret, isa, language

sys.modules[__name__ + ".language"], sys.modules[__name__ + ".isa"] = language, isa


class Kernel:
    """What the SDK's `nki.jit` returns: runs only on a Neuron device, or through `nki.simulate`."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        raise RuntimeError("no Neuron device: an SDK kernel must be run through nki.simulate")


def jit(fn=None, **options):
    return Kernel(fn) if fn is not None else Kernel


def simulate(kernel):
    def run(*arrays):
        assert all(isinstance(a, np.ndarray) for a in arrays), "the simulator takes NumPy arrays"
        # a context of its own: the gym's cost collectors see only what the gym's SDK path reports
        return contextvars.Context().run(lambda: interpret.run_kernel(kernel.fn, *arrays).outputs)
    return run
''',
}


def test_with_the_neuron_sdk_installed_kernels_run_in_its_simulator(tmp_path, monkeypatch) -> None:
    """Where `neuronxcc` is importable the candidate gets the SDK, not the interpreter, and its kernels run in
    `nki.simulate` (NumPy in and out); the gym still judges the outputs and says there is no cost estimate.
    The stand-in's kernels raise when called directly, so a kernel the gym did not route through the
    simulator fails the evaluation."""
    sdk = tmp_path / "site"
    for name, text in STAND_IN_SDK.items():
        (sdk / name).parent.mkdir(parents=True, exist_ok=True)
        (sdk / name).write_text(text)
    for path in (tmp_path, sdk, *sdk.rglob("*")):  # the candidate process runs as another uid
        path.chmod(0o755 if path.is_dir() else 0o644)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(sdk), os.environ.get("PYTHONPATH")])))
    solution = SOLUTIONS[0]
    with EvalPool(workers=1, config=EvalConfig(correctness_trials=2), sandbox="none") as pool:
        result = pool.evaluate(solution.task, Candidate(solution.path.read_text(), backend="nki"))
    assert result.status == "ok", result.error
    assert any("cost: none (the kernels ran in the Neuron SDK's CPU simulator" in n for n in result.notes), result.notes
    assert not any("kernelrl's NumPy NKI interpreter" in n for n in result.notes), result.notes
