"""Layer norm per row: two-pass mean and variance, then the affine transform."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void layer_norm(const float* restrict x, const float* restrict w, const float* restrict b, float* restrict y,
                int64_t rows, int64_t cols, float eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (int64_t c = 0; c < cols; ++c) s += xr[c];
        const float mean = s / cols;
        float q = 0.0f;
        #pragma omp simd reduction(+:q)
        for (int64_t c = 0; c < cols; ++c) { const float d = xr[c] - mean; q += d * d; }
        const float rstd = 1.0f / std::sqrt(q / cols + eps);
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
    }
}
"""

lib = load_cpp(SOURCE, functions=["layer_norm"])


class ModelNew(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        lib.layer_norm(x, self.norm.weight, self.norm.bias, y, rows, cols, self.norm.eps)
        return y
