"""Prefix sum that only accumulates positive entries."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/47_MaskedCumsum",
    "level": 1,
    "tags": ["scan", "elementwise"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 512
dim = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * (x > 0), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
