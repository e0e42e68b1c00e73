"""Square root of a positive tensor, elementwise."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/14_Sqrt",
    "level": 1,
    "tags": ["elementwise"],
}

batch_size = 256
dim = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(x)


def get_inputs():
    return [torch.rand(batch_size, dim) + 0.1]


def get_init_inputs():
    return []
