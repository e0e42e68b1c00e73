"""The triton backend's proof of work: launches recorded in the candidate's process, replayed on trusted
inputs from the candidate's kernels alone. Exploits' answers are not in the replay; honest ones are."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelrl.evaluate.redteam import CORPUS

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
CASES = CORPUS / "cases"


@pytest.fixture(scope="module")
def replayer() -> Iterator[object]:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: this covers the interpreter")
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    from kernelrl.evaluate.backends import triton_replay

    triton_replay.LaunchLog.install()
    yield triton_replay
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before


def replayed(replay_module: object, case: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the candidate's output, the replay's, the reference) for one forward of a corpus case."""
    source = Path(CASES / case).read_text()
    namespace: dict = {"__name__": f"case_{case[:-3]}"}
    exec(compile(source, case, "exec"), namespace)
    x = torch.randn(64, 1024)
    log = replay_module.LaunchLog  # type: ignore[attr-defined]
    log.take()
    y = namespace["ModelNew"](2.0)(x)
    launches = log.take()
    text, _ = replay_module.kernel_module(source)  # type: ignore[attr-defined]
    describe = replay_module.describe_argument  # type: ignore[attr-defined]
    (out,) = replay_module.replay(text, launches, {x.untyped_storage().data_ptr(): x},  # type: ignore[attr-defined]
                                  [describe(y)["tensor"]])
    return y, out, torch.relu(x) * 2.0


def test_honest_kernel_is_in_the_replay(replayer: object) -> None:
    y, out, want = replayed(replayer, "legit_triton.py")
    assert torch.allclose(y, want) and torch.allclose(out, want)


@pytest.mark.parametrize("case", ["triton_grid_callable_torch.py", "triton_numpy_no_launch.py"])
def test_answers_no_kernel_stored_are_not(replayer: object, case: str) -> None:
    y, out, want = replayed(replayer, case)
    assert torch.allclose(y, want)  # the candidate's own answer is right,
    assert not torch.allclose(out, want)  # but no launch of its kernels made it


@pytest.mark.parametrize("body", ["import numpy", "y = x_ptr.__class__", "y = np.maximum(x_ptr, 0)", "y = open('f')",
                                  "y = triton.runtime.jit.os.getcwd()", "y = x_ptr.handle.data.sum()",
                                  "y = tl.load(x_ptr, mask=[q for q in range(2)])",
                                  "tl.core.builtins.exec('0')", "y = triton.language.core.math.exp(1.0)",
                                  "m = tl.core\n    m.builtins.exec('0')"])
def test_host_code_in_a_kernel_is_refused(replayer: object, body: str) -> None:
    source = f"import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr):\n    {body}\n"
    with pytest.raises(replayer.KernelRefused):  # type: ignore[attr-defined]
        replayer.kernel_module(source)  # type: ignore[attr-defined]
    annotated = "import triton\n@triton.jit\ndef k(x_ptr: __import__('os').getcwd()):\n    pass\n"
    with pytest.raises(replayer.KernelRefused):  # type: ignore[attr-defined]
        replayer.kernel_module(annotated)  # type: ignore[attr-defined]


def test_names_imported_from_beyond_triton_language_are_not_replayed(replayer: object) -> None:
    """`from triton.language.core import builtins` binds Python's builtins: left out, so a kernel naming it is refused."""
    for imported, use in (("from triton.language.core import builtins", "builtins.exec('0')"),
                          ("from triton.language.core.builtins import exec", "exec('0')")):
        source = f"import triton\nimport triton.language as tl\n{imported}\n@triton.jit\ndef k(x_ptr):\n    {use}\n"
        with pytest.raises(replayer.KernelRefused):  # type: ignore[attr-defined]
            replayer.kernel_module(source)  # type: ignore[attr-defined]
    kept = "import triton\nfrom triton.language.extra import libdevice\n@triton.jit\ndef k(x_ptr):\n    libdevice.tanh(1.0)\n"
    assert "libdevice" in replayer.kernel_module(kept)[0]  # type: ignore[attr-defined]
