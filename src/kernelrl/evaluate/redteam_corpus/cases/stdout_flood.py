# redteam-class: sandbox-stdout-flood
# redteam-expect: crashed
# redteam-task: scaled_relu
# redteam-reason: output file size limit
# redteam-policy: {"output_limit_mb": 4}
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

SOURCE = r"""
#include <cstdint>
#include <cstdio>
void scaled_relu(const float* x, float* y, int64_t n, float s) {
    for (int r = 0; r < 200000; ++r) printf("flooding the evaluator's output with a long line of text, again and again\n");
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

