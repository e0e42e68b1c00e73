"""Root-mean-square normalisation with a learned gain."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/24_RMSNorm",
    "level": 1,
    "tags": ["norm"],
    "profiles": {"gpu": {"batch_size": 8192}},
}

batch_size = 1024
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * scale * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
