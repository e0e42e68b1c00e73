# redteam-class: legit
# redteam-expect: ok
# redteam-task: scaled_relu
# A correct kernel that prints about 16 MiB of progress on its first call (under the 64 MiB output
# limit): the evaluator keeps only the head and tail of it and the verdict is ok.
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp(r"""
#include <cstdint>
#include <cstdio>
void scaled_relu(const float* x, float* y, int64_t n, float s) {
    static bool done = false;
    if (!done) {
        done = true;
        for (int r = 0; r < 220000; ++r) printf("progress line %d of a chatty but honest kernel..........\n", r);
    }
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] > 0.f ? x[i] : 0.f) * s;
}
""", ["scaled_relu"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.scaled_relu(x, y, x.numel(), self.scale)
        return y
