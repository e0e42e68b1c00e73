"""a * x + b * y in one pass."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void axpby(const float* restrict x, const float* restrict y, float* restrict z, float a, float b, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) z[i] = a * x[i] + b * y[i];
}
"""

lib = load_cpp(SOURCE, functions=["axpby"])


class ModelNew(nn.Module):
    def __init__(self, a: float, b: float) -> None:
        super().__init__()
        self.a = a
        self.b = b

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = x.contiguous(), y.contiguous()
        z = torch.empty_like(x)
        lib.axpby(x, y, z, self.a, self.b, x.numel())
        return z
