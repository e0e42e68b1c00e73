"""Weighted sum of two tensors: a * x + b * y."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/12_Axpby",
    "level": 1,
    "tags": ["elementwise", "binary"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 192
dim = 32768


class Model(nn.Module):
    def __init__(self, a: float, b: float) -> None:
        super().__init__()
        self.a = a
        self.b = b

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.a * x + self.b * y


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1.5, -0.75]
