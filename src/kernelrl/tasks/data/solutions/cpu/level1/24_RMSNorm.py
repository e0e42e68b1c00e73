"""RMS norm per row in two passes."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void rms_norm(const float* restrict x, const float* restrict w, float* restrict y, int64_t rows, int64_t cols, float eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float q = 0.0f;
        #pragma omp simd reduction(+:q)
        for (int64_t c = 0; c < cols; ++c) q += xr[c] * xr[c];
        const float scale = 1.0f / std::sqrt(q / cols + eps);
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * scale * w[c];
    }
}
"""

lib = load_cpp(SOURCE, functions=["rms_norm"])


class ModelNew(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        lib.rms_norm(x, self.weight, y, rows, cols, self.eps)
        return y
