"""Softmax over the last dim of a 2-D tensor."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/04_Softmax",
    "level": 2,
    "tags": ["reduction", "softmax"],
}

batch_size = 256
dim = 384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
