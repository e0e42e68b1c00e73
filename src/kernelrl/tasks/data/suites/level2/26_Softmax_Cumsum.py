"""Softmax over the last dimension, then a running sum (a CDF per row)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/26_Softmax_Cumsum",
    "level": 2,
    "tags": ["softmax", "scan", "fused"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 256
dim = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(torch.softmax(x, dim=-1), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
