"""Layer normalisation over the feature dimension with learned affine parameters."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/23_LayerNorm",
    "level": 1,
    "tags": ["norm"],
    "profiles": {"gpu": {"batch_size": 8192}},
}

batch_size = 1024
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
