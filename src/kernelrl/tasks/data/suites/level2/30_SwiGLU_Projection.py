"""SwiGLU: silu(x W1) * (x W2)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/30_SwiGLU_Projection",
    "level": 2,
    "tags": ["matmul", "gating", "activation", "fused"],
    "profiles": {"gpu": {"batch_size": 8192, "in_features": 4096, "out_features": 4096}},
}

batch_size = 512
in_features = 512
out_features = 512


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(in_features, out_features, bias=False)
        self.w2 = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.w1(x)) * self.w2(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
