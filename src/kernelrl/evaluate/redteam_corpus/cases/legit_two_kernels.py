# redteam-class: legit
# redteam-expect: ok
# redteam-task: scaled_relu
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

SOURCE = r"""
#include <cstdint>
void relu(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f; }
void scale(const float* x, float* y, int64_t n, float s) { for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s; }
"""

lib = load_cpp(SOURCE, ["relu", "scale"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        tmp = torch.empty_like(x)
        y = torch.empty_like(x)
        lib.relu(x, tmp, x.numel())
        lib.scale(tmp, y, x.numel(), self.scale)
        return y

