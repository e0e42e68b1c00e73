"""Rectified linear unit, elementwise (ragged last row tile)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "redteam/nki_relu",
    "level": 1,
    "tags": ["elementwise", "activation"],
}

batch_size = 200
dim = 384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
