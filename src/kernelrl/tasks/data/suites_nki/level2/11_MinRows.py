"""Minimum of each row (keepdim, ragged last row tile)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/11_MinRows",
    "level": 2,
    "tags": ["reduction"],
}

batch_size = 200
dim = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amin(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
