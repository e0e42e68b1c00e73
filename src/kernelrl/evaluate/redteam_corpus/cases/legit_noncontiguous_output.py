# redteam-class: legit
# redteam-expect: ok
# redteam-task: scaled_relu
# The kernel writes the transposed result and returns a transposed (non-contiguous) view of it; outputs may
# have any strides: the runner copies such an output to contiguous memory inside the timed call.
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

SOURCE = r"""
#include <cstdint>
void scaled_relu_t(const float* x, float* yt, int64_t rows, int64_t cols, float s) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            const float v = x[i * cols + j];
            yt[j * rows + i] = (v > 0.f ? v : 0.f) * s;
        }
}
"""

lib = load_cpp(SOURCE, ["scaled_relu_t"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        yt = torch.empty(cols, rows)
        lib.scaled_relu_t(x, yt, rows, cols, self.scale)
        return yt.t()
