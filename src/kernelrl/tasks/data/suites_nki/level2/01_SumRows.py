"""Sum of each row (keepdim)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/01_SumRows",
    "level": 2,
    "tags": ["reduction"],
}

batch_size = 256
dim = 384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
