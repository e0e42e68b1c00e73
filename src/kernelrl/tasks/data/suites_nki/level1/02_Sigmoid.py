"""Logistic sigmoid, elementwise."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/02_Sigmoid",
    "level": 1,
    "tags": ["elementwise", "activation"],
}

batch_size = 256
dim = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
