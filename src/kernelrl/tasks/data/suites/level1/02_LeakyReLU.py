"""Leaky ReLU with a configurable negative slope."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/02_LeakyReLU",
    "level": 1,
    "tags": ["elementwise", "activation"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 192
dim = 32768


class Model(nn.Module):
    def __init__(self, slope: float) -> None:
        super().__init__()
        self.slope = slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.slope)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.02]
