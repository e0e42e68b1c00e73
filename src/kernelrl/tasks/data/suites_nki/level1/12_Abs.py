"""Absolute value, elementwise."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/12_Abs",
    "level": 1,
    "tags": ["elementwise"],
}

batch_size = 256
dim = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.abs(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
