"""Sum over the last dimension."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/13_SumRows",
    "level": 1,
    "tags": ["reduction"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 768
dim = 16384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
