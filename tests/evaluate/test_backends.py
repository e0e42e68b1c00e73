"""The triton and cuda backends without a GPU, and torch load_inline candidates on the cpu backend."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, Status
from kernelrl.tasks import Task
from tests.evaluate.candidates import RELU_TASK

TRITON = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_relu_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x, 0.0) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        scaled_relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, self.scale, BLOCK=1024)
        return y
'''

CUDA = r'''
import torch
import torch.nn as nn
from kernelrl.native import load_cuda

SOURCE = """
__global__ void scaled_relu_kernel(const float* x, float* y, long n, float s) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f) * s;
}

void scaled_relu(const float* x, float* y, long n, float s) {
    scaled_relu_kernel<<<(n + 255) / 256, 256>>>(x, y, n, s);
}
"""

lib = load_cuda(SOURCE, ["scaled_relu"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        lib.scaled_relu(x, y, x.numel(), self.scale)
        return y
'''

LOAD_INLINE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = """
#include <torch/extension.h>
torch::Tensor scaled_relu(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = (px[i] > 0 ? px[i] : 0) * (float)s;
    return y;
}
"""
ext = load_inline("kernelrl_test_scaled_relu", cpp_sources=cpp, functions=["scaled_relu"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.scaled_relu(x.contiguous(), self.scale)
'''

TASK = Task(id="test/scaled_relu", source=RELU_TASK)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_triton_runs_under_the_interpreter_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the interpreter path is not used")
    with EvalPool(workers=1, config=EvalConfig()) as pool:
        result = pool.evaluate(TASK, Candidate(TRITON, backend="triton"))
        assert result.status == Status.OK, result.feedback
        assert result.timing is None and any("interpreter" in n for n in result.notes)
        broken = TRITON.replace("tl.maximum(x, 0.0) * scale", "tl.maximum(x, 0.0) * scale + 1.0")
        assert pool.evaluate(TASK, Candidate(broken, backend="triton")).status == Status.INCORRECT


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_compiles_with_nvcc_and_reports_not_run() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: this test covers the compile-only path")
    with EvalPool(workers=1) as pool:
        result = pool.evaluate(TASK, Candidate(CUDA, backend="cuda"))
        assert result.status == Status.COMPILED, result.feedback
        assert "not run" in " ".join(result.notes)
        broken = CUDA.replace("fmaxf(x[i], 0.0f)", "fmaxf(x[i], undefined_value)")
        failed = pool.evaluate(TASK, Candidate(broken, backend="cuda"))
        assert failed.status == Status.COMPILE_ERROR
        line = next(i for i, text in enumerate(broken.splitlines(), 1) if "undefined_value" in text)
        assert f"candidate.py:{line}" in failed.error, failed.error


@pytest.mark.slow
def test_load_inline_candidates_are_accepted() -> None:
    """torch's own extension builder (~1 min on 2 cores). Its cache is the evaluation's own (DESIGN: state
    that outlives an evaluation): a build is never reused by a later evaluation, which could not trust it."""
    with EvalPool(workers=1, config=EvalConfig(measure_timing=False)) as pool:
        first = pool.evaluate(TASK, Candidate(LOAD_INLINE))
        assert first.status == Status.OK, first.feedback


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_interpreter_gaps_are_named() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the interpreter path is not used")
    autotuned = TRITON.replace(
        "@triton.jit",
        '@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024})], key=["n"])\n@triton.jit',
    ).replace("scaled_relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, self.scale, BLOCK=1024)",
              'scaled_relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, self.scale)')
    with EvalPool(workers=1) as pool:
        result = pool.evaluate(TASK, Candidate(autotuned, backend="triton"))
    assert result.status == Status.RUNTIME_ERROR
    assert "autotune is not supported by the Triton interpreter" in result.error


def test_gpu_check_script_runs_every_backend() -> None:
    """bench/gpu_check.py: real timings on a GPU machine; here, the CPU-only verdicts."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cpu     ok" in proc.stdout and "triton  ok" in proc.stdout


def test_cuda_kernel_name_proof_matches_whole_identifiers() -> None:
    from kernelrl.evaluate.guards import declared_cuda_kernels, launched_own_kernel

    source = """
    __global__ void scale_kernel(float* x, int n) {}
    template <typename T> __global__ __launch_bounds__(256) void add_bias(T* y) {}
    """
    declared = declared_cuda_kernels(source)
    assert declared == {"scale_kernel", "add_bias"}
    assert launched_own_kernel(declared, ["void scale_kernel(float*, int)"])
    assert launched_own_kernel(declared, ["void add_bias<float>(float*)"])
    # torch's own kernels, even with a similar name, and library GEMMs prove nothing
    assert not launched_own_kernel(declared, ["void at::native::vectorized_elementwise_kernel<4, at::native::scale_kernel_functor>"])
    assert not launched_own_kernel(declared, ["ampere_sgemm_128x64_nn", "void my_scale_kernel(float*)"])
    assert not launched_own_kernel(set(), ["void scale_kernel(float*, int)"])


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a GPU and CUPTI")
def test_profiler_sees_a_launched_kernel() -> None:
    import torch

    from kernelrl.evaluate.guards import profiled_cuda_kernels

    x = torch.ones(1024, device="cuda")
    assert profiled_cuda_kernels(lambda: x * 2)
