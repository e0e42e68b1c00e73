"""Rectified linear unit, elementwise (a few elements: small enough to write the answer as constants)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "redteam/nki_relu_tiny",
    "level": 1,
    "tags": ["elementwise", "activation"],
}

batch_size = 4
dim = 8


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
