"""A broken task is a task error (runtime_error, "the task ..."), never an evaluator crash or a hang."""

from __future__ import annotations

import time

import pytest
import torch

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, Status
from kernelrl.evaluate.sandbox import sandbox_env
from kernelrl.tasks import Task

BASE_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
'''

CUDA_INPUTS = BASE_TASK.replace("return [torch.randn(64, 32)]", "return [torch.randn(64, 32).cuda()]")
MISSING_MODULE = BASE_TASK.replace(  # an optional module the machine lacks (einops was, before it became a dependency)
    "import torch.nn as nn\n", "import torch.nn as nn\nfrom kernelrl_absent_optional_module import rearrange\n")
HUB = BASE_TASK.replace(
    "        super().__init__()\n\n    def forward",
    "        super().__init__()\n        from huggingface_hub import hf_hub_download\n\n"
    '        self.config_path = hf_hub_download("kernelrl-test/no-such-model", "config.json")\n\n    def forward',
)
BROKEN_FORWARD = BASE_TASK.replace("return torch.relu(x)", "return torch.relu(x) @ torch.ones(5, 5)")


def _evaluate(pool: EvalPool, source: str) -> tuple[str, str, float]:
    started = time.monotonic()
    result = pool.evaluate(Task(id="test/broken", source=source), Candidate(CANDIDATE))
    return result.status, result.error or "", time.monotonic() - started


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: .cuda() works")
def test_broken_tasks_are_task_errors() -> None:
    with EvalPool(workers=1, config=EvalConfig(correctness_trials=1, guards=False, static_severity={"*": "warn"})) as pool:
        status, error, _ = _evaluate(pool, CUDA_INPUTS)
        assert status == Status.RUNTIME_ERROR, error
        assert error.startswith("the task's get_inputs() failed"), error
        assert "GPU" in error and "\n" not in error

        status, error, _ = _evaluate(pool, MISSING_MODULE)
        assert status == Status.RUNTIME_ERROR
        assert error.startswith("the task failed to load") and "kernelrl_absent_optional_module" in error, error
        assert "not installed" in error, error

        status, error, seconds = _evaluate(pool, HUB)
        assert status == Status.RUNTIME_ERROR
        assert error.startswith("the task's Model(*get_init_inputs()) failed") and "Hugging Face Hub" in error, error
        assert seconds < 60

        status, error, _ = _evaluate(pool, BROKEN_FORWARD)
        assert status == Status.RUNTIME_ERROR
        assert error.startswith("the task's Model.forward failed") and "reference.py line" in error, error


def test_the_sandbox_is_offline_for_the_hub() -> None:
    env = sandbox_env("/tmp/cache")
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
