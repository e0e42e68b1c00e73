"""a * sigmoid(b) over the two halves of each row, without materialising the chunks."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void sigmoid_gate(const float* restrict x, float* restrict y, int64_t rows, int64_t half) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* a = x + r * 2 * half;
        const float* g = a + half;
        float* yr = y + r * half;
        #pragma omp simd
        for (int64_t c = 0; c < half; ++c) yr[c] = a[c] / (1.0f + std::exp(-g[c]));
    }
}
"""

lib = load_cpp(SOURCE, functions=["sigmoid_gate"], extra_flags=["-ffast-math"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, width = x.shape
        y = x.new_empty(rows, width // 2)
        lib.sigmoid_gate(x, y, rows, width // 2)
        return y
