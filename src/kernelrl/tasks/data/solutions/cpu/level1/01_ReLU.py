"""ReLU as one vectorised pass."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void relu_kernel(const float* restrict x, float* restrict y, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}
"""

lib = load_cpp(SOURCE, functions=["relu_kernel"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu_kernel(x, y, x.numel())
        return y
