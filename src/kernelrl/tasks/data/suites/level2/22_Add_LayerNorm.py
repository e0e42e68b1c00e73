"""Residual addition followed by layer normalisation."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/22_Add_LayerNorm",
    "level": 2,
    "tags": ["norm", "residual", "fused"],
    "profiles": {"gpu": {"batch_size": 16384, "dim": 4096}},
}

batch_size = 1024
dim = 2048


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
