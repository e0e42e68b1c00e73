"""2x2 max pooling, stride 2."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void maxpool2x2(const float* restrict x, float* restrict y, int64_t planes, int64_t h, int64_t w) {
    const int64_t oh = h / 2, ow = w / 2;
    #pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
        const float* xp = x + p * h * w;
        float* yp = y + p * oh * ow;
        for (int64_t r = 0; r < oh; ++r) {
            const float* a = xp + 2 * r * w;
            const float* b = a + w;
            for (int64_t c = 0; c < ow; ++c) {
                const float m0 = a[2 * c] > a[2 * c + 1] ? a[2 * c] : a[2 * c + 1];
                const float m1 = b[2 * c] > b[2 * c + 1] ? b[2 * c] : b[2 * c + 1];
                yp[r * ow + c] = m0 > m1 ? m0 : m1;
            }
        }
    }
}
"""

lib = load_cpp(SOURCE, functions=["maxpool2x2"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        y = x.new_empty(n, c, h // 2, w // 2)
        lib.maxpool2x2(x, y, n * c, h, w)
        return y
