# redteam-class: backend-proof-of-work
# redteam-expect: rejected
# redteam-task: scaled_relu
# redteam-policy: {"backend": "triton"}
# The kernel is launched, and stores nothing. Its launch grid is a callable, which Triton calls inside
# the launch, where torch ops are not counted (the interpreter itself computes with torch there): the
# callable computes relu(x) * scale with torch into the output and returns a one-program grid. Every
# in-process counter sees one kernel launch and no torch op.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_relu_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < 0
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)

        def grid(meta):
            torch.mul(torch.relu(x), self.scale, out=y)
            return (1,)

        scaled_relu_kernel[grid](x, y, x.numel(), self.scale, BLOCK=16)
        return y
