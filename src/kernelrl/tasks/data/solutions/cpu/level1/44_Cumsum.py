"""Row prefix sums with a double running total."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void cumsum_rows(const float* restrict x, float* restrict y, int64_t rows, int64_t cols) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        double acc = 0.0;
        for (int64_t c = 0; c < cols; ++c) { acc += xr[c]; yr[c] = (float)acc; }
    }
}
"""

lib = load_cpp(SOURCE, functions=["cumsum_rows"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        lib.cumsum_rows(x, y, rows, cols)
        return y
