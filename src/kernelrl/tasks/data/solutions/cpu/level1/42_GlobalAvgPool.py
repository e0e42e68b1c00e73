"""Global average pooling: one vectorised sum per plane."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void plane_mean(const float* restrict x, float* restrict y, int64_t planes, int64_t size) {
    #pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
        const float* xp = x + p * size;
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (int64_t i = 0; i < size; ++i) s += xp[i];
        y[p] = s / size;
    }
}
"""

lib = load_cpp(SOURCE, functions=["plane_mean"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        y = x.new_empty(n, c)
        lib.plane_mean(x, y, n * c, h * w)
        return y
