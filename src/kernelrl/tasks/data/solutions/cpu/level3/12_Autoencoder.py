"""Six linear layers with the activations applied in place after each matmul."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

static void matmul_rows(const float* restrict x, const float* restrict wt, const float* restrict bias,
                        float* restrict y, int64_t m, int64_t k, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
        int64_t rows = m - i0 < 4 ? m - i0 : 4;
        float* out[4];
        for (int64_t r = 0; r < 4; ++r) out[r] = y + (i0 + (r < rows ? r : 0)) * n;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < n; ++j) out[r][j] = bias ? bias[j] : 0.0f;
        if (rows == 4) {
            float* y0 = out[0]; float* y1 = out[1]; float* y2 = out[2]; float* y3 = out[3];
            const float* x0 = x + i0 * k;
            for (int64_t t = 0; t < k; ++t) {
                const float* w = wt + t * n;
                const float a0 = x0[t], a1 = x0[k + t], a2 = x0[2 * k + t], a3 = x0[3 * k + t];
                #pragma omp simd
                for (int64_t j = 0; j < n; ++j) {
                    const float wj = w[j];
                    y0[j] += a0 * wj; y1[j] += a1 * wj; y2[j] += a2 * wj; y3[j] += a3 * wj;
                }
            }
        } else {
            for (int64_t r = 0; r < rows; ++r) {
                const float* xr = x + (i0 + r) * k;
                float* yr = out[r];
                for (int64_t t = 0; t < k; ++t) {
                    const float a = xr[t];
                    const float* w = wt + t * n;
                    #pragma omp simd
                    for (int64_t j = 0; j < n; ++j) yr[j] += a * w[j];
                }
            }
        }
    }
}

// w is (n x k) as stored by nn.Linear; wt receives its transpose (k x n).
static void transpose(const float* restrict w, float* restrict wt, int64_t n, int64_t k) {
    for (int64_t j0 = 0; j0 < n; j0 += 32)
        for (int64_t t0 = 0; t0 < k; t0 += 32)
            for (int64_t j = j0; j < (j0 + 32 < n ? j0 + 32 : n); ++j)
                for (int64_t t = t0; t < (t0 + 32 < k ? t0 + 32 : k); ++t) wt[t * n + j] = w[j * k + t];
}

void linear(const float* restrict x, const float* restrict w, const float* restrict b, float* restrict wt,
            float* restrict y, int64_t m, int64_t k, int64_t n) {
    transpose(w, wt, n, k);
    matmul_rows(x, wt, b, y, m, k, n);
}

void relu_inplace(float* restrict y, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

void sigmoid_inplace(float* restrict y, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-y[i]));
}
"""

lib = load_cpp(SOURCE, functions=["linear", "relu_inplace", "sigmoid_inplace"], extra_flags=["-ffast-math"])


class ModelNew(nn.Module):
    def __init__(self, features: int, bottleneck: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, bottleneck),
        )
        self.decoder = nn.Sequential(
            nn.Linear(bottleneck, 128), nn.ReLU(), nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = [m for m in [*self.encoder, *self.decoder] if isinstance(m, nn.Linear)]
        h = x.contiguous()
        for index, layer in enumerate(layers):
            k, n = layer.in_features, layer.out_features
            wt = h.new_empty(k * n)
            y = h.new_empty(h.shape[0], n)
            lib.linear(h, layer.weight, layer.bias, wt, y, h.shape[0], k, n)
            if index == len(layers) - 1:
                lib.sigmoid_inplace(y, y.numel())
            elif index != 2:
                lib.relu_inplace(y, y.numel())
            h = y
        return h
