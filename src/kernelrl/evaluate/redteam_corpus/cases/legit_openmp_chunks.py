# redteam-class: legit
# redteam-expect: ok
# redteam-task: scaled_relu
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

SOURCE = r"""
#include <cstdint>
#include <omp.h>
void scaled_relu(const float* x, float* y, int64_t n, float s) {
    #pragma omp parallel
    {
        int t = omp_get_thread_num(), k = omp_get_num_threads();
        int64_t lo = n * t / k, hi = n * (t + 1) / k;
        for (int64_t i = lo; i < hi; ++i) y[i] = x[i] > 0.f ? x[i] * s : 0.f;
    }
}
"""

lib = load_cpp(SOURCE, ["scaled_relu"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.scaled_relu(x, y, x.numel(), self.scale)
        return y

