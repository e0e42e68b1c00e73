"""Mean squared error in one pass with a double accumulator."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void mse(const float* restrict a, const float* restrict b, float* restrict out, int64_t n) {
    double acc = 0.0;
    #pragma omp parallel for simd reduction(+:acc) schedule(static)
    for (int64_t i = 0; i < n; ++i) { const double d = (double)a[i] - b[i]; acc += d * d; }
    out[0] = (float)(acc / n);
}
"""

lib = load_cpp(SOURCE, functions=["mse"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        p, t = predictions.contiguous(), targets.contiguous()
        out = torch.empty(())
        lib.mse(p, t, out, p.numel())
        return out
