"""A fused Triton kernel for relu(x * scale + bias) (runs under the interpreter without a GPU)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_bias_relu_kernel(x_ptr, scale_ptr, bias_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    col = offsets % cols
    x = tl.load(x_ptr + offsets, mask=mask)
    v = x * tl.load(scale_ptr + col, mask=mask) + tl.load(bias_ptr + col, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(v, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scale_bias_relu_kernel[(triton.cdiv(n, 1024),)](x, self.scale, self.bias, y, n, x.shape[1], BLOCK=1024)
        return y
