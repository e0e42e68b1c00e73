"""tanh per element as (1 - e) / (1 + e) with e = exp(-2|v|), vectorised."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void tanh_kernel(const float* restrict x, float* restrict y, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        const float e = std::exp(-2.0f * std::fabs(v));
        y[i] = std::copysign((1.0f - e) / (1.0f + e), v);
    }
}
"""

lib = load_cpp(SOURCE, functions=["tanh_kernel"], extra_flags=["-ffast-math"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.tanh_kernel(x, y, x.numel())
        return y
