"""Cross-entropy: per-row log-sum-exp minus the label's logit, averaged."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

static float row_max(const float* restrict xr, int64_t cols) {
    float m = -INFINITY;
    #pragma omp simd reduction(max:m)
    for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
    return m;
}

void cross_entropy(const float* restrict x, const int64_t* restrict labels, float* restrict out,
                   int64_t rows, int64_t cols) {
    double total = 0.0;
    #pragma omp parallel for reduction(+:total) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        const float m = row_max(xr, cols);
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
        total += (double)m + std::log(s) - xr[labels[r]];
    }
    out[0] = (float)(total / rows);
}
"""

lib = load_cpp(SOURCE, functions=["cross_entropy"], extra_flags=["-ffast-math"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x, labels = logits.contiguous(), labels.contiguous()
        out = torch.empty(())
        lib.cross_entropy(x, labels, out, x.shape[0], x.shape[1])
        return out
