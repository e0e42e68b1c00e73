"""Suffix sum (prefix sum from the end) over the last dimension."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/45_ReverseCumsum",
    "level": 1,
    "tags": ["scan"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 512
dim = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flip(torch.cumsum(torch.flip(x, [-1]), dim=-1), [-1])


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
