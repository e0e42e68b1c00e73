"""Triton kernels with reductions and helper @triton.jit functions under the interpreter, through a real pool."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, Status
from kernelrl.tasks import Task

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the interpreter path is not used"),
]

SOFTMAX_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 16
dim = 100


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

SUM_TASK = SOFTMAX_TASK.replace("torch.softmax(x, dim=1)", "torch.sum(x, dim=1)")

# Row softmax, one program per row: tl.max and tl.sum, a helper @triton.jit function, nested jit.
SOFTMAX = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _stable_exp(x, row_max):
    return tl.exp(x - row_max)


@triton.jit
def _normalise(x):
    row_max = tl.max(x, axis=0)
    num = _stable_exp(x, row_max)
    return num / tl.sum(num, axis=0)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    tl.store(out_ptr + row * out_row_stride + cols, _normalise(x), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
        return y
'''

# Sum over the last dim in blocks, accumulating with tl.sum.
ROW_SUM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + pid * stride + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
        return out
'''


def test_reductions_and_helper_functions_run_under_the_interpreter() -> None:
    with EvalPool(workers=1, config=EvalConfig(correctness_trials=2)) as pool:
        softmax = pool.evaluate(Task(id="test/softmax", source=SOFTMAX_TASK), Candidate(SOFTMAX, backend="triton"))
        assert softmax.status == Status.OK, softmax.feedback
        row_sum = pool.evaluate(Task(id="test/row_sum", source=SUM_TASK), Candidate(ROW_SUM, backend="triton"))
        assert row_sum.status == Status.OK, row_sum.feedback
        wrong = ROW_SUM.replace("tl.sum(acc, axis=0)", "tl.max(acc, axis=0)")
        assert pool.evaluate(Task(id="test/row_sum", source=SUM_TASK), Candidate(wrong, backend="triton")).status == Status.INCORRECT
