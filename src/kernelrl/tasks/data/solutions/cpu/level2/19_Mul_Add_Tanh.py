"""tanh(x * y + z) in one pass instead of three."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void mul_add_tanh(const float* restrict x, const float* restrict y, const float* restrict z, float* restrict out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i] * y[i] + z[i];
        const float e = std::exp(-2.0f * std::fabs(v));
        out[i] = std::copysign((1.0f - e) / (1.0f + e), v);
    }
}
"""

lib = load_cpp(SOURCE, functions=["mul_add_tanh"], extra_flags=["-ffast-math"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x, y, z = x.contiguous(), y.contiguous(), z.contiguous()
        out = torch.empty_like(x)
        lib.mul_add_tanh(x, y, z, out, x.numel())
        return out
