# redteam-class: legit
# redteam-expect: ok
# redteam-task: scaled_relu
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

SOURCE = r"""
#include <cstdint>
#include <cmath>
void scaled_relu(const float* x, float* y, int64_t n, float s) {
    const double ds = s;
    for (int64_t i = 0; i < n; ++i) y[i] = (float)(std::fmax((double)x[i], 0.0) * ds);
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

