"""An answer wrong on its first correctness trial is judged before the judge draws the other trials' inputs:
the candidate holds one input set when its first forward runs (it costs one draw, one reference forward and
one small arena, not five)."""

from __future__ import annotations

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool
from kernelrl.tasks import Task
from tests.evaluate.candidates import RELU_TASK

# Reports, through its (wrong) output, how many correctness input sets its process holds when forward runs.
COUNTS_ITS_INPUT_SETS = '''
import gc
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp("void zero(float* y, long n) { for (long i = 0; i < n; ++i) y[i] = 0.0f; }", ["zero"])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x):
        runner = next(o for o in gc.get_objects() if type(o).__name__ == "Runner")
        held = [name for name in runner.inputs if name.startswith("t")]
        y = torch.empty_like(x)
        lib.zero(y, y.numel())
        return y.add_(1000.0 + len(held))
'''


def test_the_other_trials_are_drawn_only_after_the_first_passes() -> None:
    config = EvalConfig(measure_timing=False, static_severity={"*": "warn"}, torch_ops="allow")
    with EvalPool(workers=1, config=config) as pool:
        result = pool.evaluate(Task(id="test/relu", source=RELU_TASK), Candidate(COUNTS_ITS_INPUT_SETS))
    assert result.status == "incorrect" and result.correctness is not None and result.correctness.failing_trial == 0
    assert "got 1001," in (result.error or ""), result.error  # one set (t0) held, not all five
