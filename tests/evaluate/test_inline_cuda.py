"""torch `load_inline` CUDA candidates on a machine without a GPU: compiled by nvcc, reported `compiled`."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.utils.cpp_extension

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, Status
from kernelrl.evaluate.config import StageTimeouts
from kernelrl.evaluate.inline_cuda import cuda_home
from kernelrl.tasks import Task
from tests.evaluate.candidates import RELU_TASK

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: this covers the compile-only path"),
]

TASK = Task(id="test/scaled_relu", source=RELU_TASK)

# The KernelBench example's style: one kernel plus a host launcher in cuda_sources, a declaration in cpp_sources.
ONE_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

scaled_relu_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scaled_relu_kernel(const float* x, float* out, int size, float scale) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = fmaxf(x[idx], 0.0f) * scale;
    }
}

torch::Tensor scaled_relu_cuda(torch::Tensor x, double scale) {
    auto size = x.numel();
    auto out = torch::zeros_like(x);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    scaled_relu_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), size, (float)scale);
    return out;
}
"""

scaled_relu_cpp_source = "torch::Tensor scaled_relu_cuda(torch::Tensor x, double scale);"

scaled_relu = load_inline(
    name="scaled_relu",
    cpp_sources=scaled_relu_cpp_source,
    cuda_sources=scaled_relu_source,
    functions=["scaled_relu_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.scaled_relu = scaled_relu

    def forward(self, x):
        return self.scaled_relu.scaled_relu_cuda(x, self.scale)
'''

# Model-written style: __device__ helpers, two kernels, a dispatch over dtypes, stream and guard headers,
# extra nvcc flags, several functions bound.
TWO_KERNELS = r'''
import torch
import torch.nn as nn
import torch.utils.cpp_extension

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

template <typename scalar_t>
__device__ __forceinline__ scalar_t relu_op(scalar_t v) {
    return v > scalar_t(0) ? v : scalar_t(0);
}

__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

template <typename scalar_t>
__global__ void relu_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = relu_op(x[i]);
}

__global__ void scale_kernel(float* y, int64_t n, float s, float* total) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    float v = 0.0f;
    if (i < n) { y[i] *= s; v = y[i]; }
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) atomicAdd(total, v);
}

torch::Tensor fused_forward(torch::Tensor x, double s) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    const c10::cuda::OptionalCUDAGuard guard(device_of(x));
    auto y = torch::empty_like(x);
    auto total = torch::zeros({1}, x.options());
    const int64_t n = x.numel();
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "relu_kernel", ([&] {
        relu_kernel<scalar_t><<<blocks, threads, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
    }));
    scale_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(y.data_ptr<float>(), n, (float)s, total.data_ptr<float>());
    return y;
}

torch::Tensor relu_only(torch::Tensor x) {
    auto y = torch::empty_like(x);
    relu_kernel<float><<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""

cpp_src = """
torch::Tensor fused_forward(torch::Tensor x, double s);
torch::Tensor relu_only(torch::Tensor x);
"""

fused = torch.utils.cpp_extension.load_inline(
    name="fused_relu_scale_v2",
    cpp_sources=[cpp_src],
    cuda_sources=[cuda_src],
    functions=["fused_forward", "relu_only"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    with_cuda=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused.fused_forward(x.contiguous(), self.scale)
'''


def _line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


def test_a_partial_toolkit_is_named_as_the_machine_s_gap() -> None:
    """nvcc without cuBLAS/cuSPARSE headers: torch's ATen/cuda headers cannot compile here; the note says so."""
    from kernelrl.evaluate.inline_cuda import _missing_toolkit_headers
    from kernelrl.native.diagnostics import sanitize_log

    header = torch.utils.cpp_extension.include_paths()[0] + "/ATen/cuda/CUDAContextLight.h"
    log = (f"In file included from kernel.cu:3:\n{header}:10:10: fatal error: cusparse.h: No such file or directory\n"
           "   10 | #include <cusparse.h>\ncompilation terminated.")
    kept = sanitize_log(log, "kernel.cu", "nvcc", "cuda")
    assert "fatal error: cusparse.h: No such file or directory" in kept  # torch's headers are not "other files"
    assert "#include <cusparse.h>" not in kept
    (note,) = _missing_toolkit_headers(kept)
    assert "no <cusparse.h>" in note and "ATen/cuda/CUDAContextLight.h" in note


def test_cuda_home_is_found_from_nvcc_on_path() -> None:
    home = cuda_home()
    assert home is not None and shutil.which("nvcc") is not None


@pytest.mark.slow
def test_load_inline_cuda_candidates_compile_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real nvcc builds against torch's headers (~1.5-3 min each on two shared, busy cores, hence the long
    build limits), two at a time on two workers; the last candidate reuses the first one's nvcc build."""
    monkeypatch.setenv("KERNELRL_BUILD_TIMEOUT", "600")
    config = EvalConfig(measure_timing=False, timeouts=StageTimeouts(build=600))
    broken = ONE_KERNEL.replace("fmaxf(x[idx], 0.0f) * scale", "fmaxf(x[idx], 0.0f) * scale_factor")
    wrong_binding = ONE_KERNEL.replace('functions=["scaled_relu_cuda"]', 'functions=["scaled_relu_gpu"]')
    with EvalPool(workers=2, config=config) as pool:
        pending = {name: pool.submit(TASK, Candidate(source, backend="cuda"))
                   for name, source in (("one", ONE_KERNEL), ("two", TWO_KERNELS), ("broken", broken))}
        one = pending["one"].result()
        assert one.status == Status.COMPILED, one.feedback
        assert "not run" in " ".join(one.notes)
        assert "CUDA_HOME" not in one.feedback

        unbound = pool.evaluate(TASK, Candidate(wrong_binding, backend="cuda"))  # nvcc build is cached
        assert unbound.status == Status.COMPILE_ERROR, unbound.feedback
        assert "scaled_relu_gpu" in unbound.error, unbound.error

        two = pending["two"].result()
        assert two.status == Status.COMPILED, two.feedback

        failed = pending["broken"].result()
        assert failed.status == Status.COMPILE_ERROR, failed.feedback
        assert f"candidate.py:{_line_of(broken, 'scale_factor')}" in failed.error, failed.error
        assert "scale_factor" in failed.error and "undefined" in failed.error
        assert not any("not run" in n for n in failed.notes)
