"""Softmax of x / temperature over the last dimension."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/22_SoftmaxTemperature",
    "level": 1,
    "tags": ["softmax", "reduction"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 512
dim = 8192


class Model(nn.Module):
    def __init__(self, temperature: float) -> None:
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x / self.temperature, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.7]
