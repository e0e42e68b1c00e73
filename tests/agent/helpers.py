"""Small task suites and answers shared by the agent and bench tests."""

from __future__ import annotations

from pathlib import Path

from kernelrl.evaluate import EvalConfig, StageTimeouts
from kernelrl.tasks import Task, example_path, load_task, resize
from tests.evaluate import candidates as C

EVAL = EvalConfig(
    correctness_trials=3, timing_trials=5, timing_budget_s=0.2, memory_limit_mb=4096,
    timeouts=StageTimeouts(build=60, init=10, correctness=10, timing=20),
)


def relu_task() -> Task:
    return Task(id="test/scaled_relu", source=C.RELU_TASK, level=1)


def example_task() -> Task:
    return resize(load_task(example_path("scale_bias_relu.py")), {"batch_size": 32, "features": 1024})


def example_kernel() -> str:
    return example_path("scale_bias_relu_cpu.py").read_text()


def fenced(code: str, before: str = "Here is my kernel.", after: str = "") -> str:
    return f"{before}\n\n```python\n{code.strip()}\n```\n{after}"


def write_suite(root: Path) -> Path:
    """A two-level suite: level1/1_scaled_relu.py and level2/1_scale_bias_relu.py (small sizes)."""
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    (root / "level1" / "1_scaled_relu.py").write_text(C.RELU_TASK)
    source = example_task().source.replace('"level": 1, ', "").replace('"id": "example/scale_bias_relu", ', "")
    (root / "level2" / "1_scale_bias_relu.py").write_text(source)
    return root


# Buggy candidates that still do their work in a real kernel (so anti-hacking checks let them through).
WRONG_KERNEL = C.GOOD.replace("(x[i] > 0 ? x[i] : 0) * s;", "(x[i] > 0 ? x[i] : 0) * s + 0.5f;")  # incorrect
BAD_CALL = C.GOOD.replace("x.numel(), self.scale)", "x.numel())")  # runtime error: 3 of 4 arguments
SHORT_OUTPUT = C.GOOD.replace("y = torch.empty_like(x)", "y = torch.empty(x.numel() - 1)").replace(
    "x.numel(), self.scale)", "x.numel() - 1, self.scale)"
)  # incorrect: shape (4095,)
assert WRONG_KERNEL != C.GOOD and BAD_CALL != C.GOOD and "- 1, self.scale" in SHORT_OUTPUT
