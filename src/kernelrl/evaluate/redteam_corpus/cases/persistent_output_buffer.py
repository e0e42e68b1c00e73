# redteam-class: output-reuse
# redteam-expect: rejected
# redteam-task: scaled_relu
# redteam-reason: allocate the output per call
# An honest kernel that writes every call's result into one buffer it keeps and returns it each time. The
# judge keeps the outputs of all calls of a timed request and reads them afterwards, so every call but the
# last returned a buffer the next call overwrote: refused, with a message that says what to change.
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

SOURCE = r"""
#include <cstdint>
void scaled_relu(const float* x, float* y, int64_t n, float s) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] > 0.f ? x[i] : 0.f) * s;
}
"""

lib = load_cpp(SOURCE, ["scaled_relu"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.out = torch.empty(0)

    def forward(self, x):
        x = x.contiguous()
        if self.out.shape != x.shape:
            self.out = torch.empty_like(x)
        lib.scaled_relu(x, self.out, x.numel(), self.scale)
        return self.out
