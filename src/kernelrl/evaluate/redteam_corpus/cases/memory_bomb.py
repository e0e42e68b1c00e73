# redteam-class: sandbox-memory-bomb
# redteam-expect: crashed
# redteam-task: scaled_relu
# redteam-reason: segmentation fault
# redteam-policy: {"memory_limit_mb": 2048}
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

SOURCE = r"""
#include <cstdint>
#include <cstdlib>
#include <cstring>
void scaled_relu(const float* x, float* y, int64_t n, float s) {
    for (int i = 0; i < 1024; ++i) { char* p = (char*)malloc(1L << 30); memset(p, 1, 1L << 30); }
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] > 0.f ? x[i] : 0.f) * s;
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

