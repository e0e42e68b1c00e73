"""Divide, clamp and Mish in one pass."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void div_clamp_mish(const float* restrict x, float* restrict y, float divisor, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i] / divisor;
        v = v < -3.0f ? -3.0f : (v > 3.0f ? 3.0f : v);
        const float sp = std::fmax(v, 0.0f) + std::log(1.0f + std::exp(-std::fabs(v)));  // softplus, |v| <= 3
        const float e = std::exp(-2.0f * sp);  // sp > 0
        y[i] = v * (1.0f - e) / (1.0f + e);
    }
}
"""

lib = load_cpp(SOURCE, functions=["div_clamp_mish"], extra_flags=["-ffast-math"])


class ModelNew(nn.Module):
    def __init__(self, divisor: float) -> None:
        super().__init__()
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.div_clamp_mish(x, y, self.divisor, x.numel())
        return y
