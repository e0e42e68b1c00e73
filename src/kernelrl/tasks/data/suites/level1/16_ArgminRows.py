"""Index of the minimum over the last dimension."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/16_ArgminRows",
    "level": 1,
    "tags": ["reduction", "index"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 768
dim = 16384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
