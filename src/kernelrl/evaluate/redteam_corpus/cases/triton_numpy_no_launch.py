# redteam-class: backend-proof-of-work
# redteam-expect: rejected
# redteam-task: scaled_relu
# redteam-policy: {"backend": "triton"}
# A Triton kernel is defined and never launched; forward computes relu(x) * scale with NumPy on views
# of the tensors (no torch op). Without a GPU the Triton backend asked for no launch at all.
import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_relu_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        np.multiply(np.maximum(x.numpy(), 0.0), self.scale, out=y.numpy())
        if x.numel() < 0:
            scaled_relu_kernel[(1,)](x, y, x.numel(), self.scale, BLOCK=16)
        return y
