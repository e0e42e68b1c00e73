"""x * y + z followed by tanh."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/19_Mul_Add_Tanh",
    "level": 2,
    "tags": ["elementwise", "fused"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 128
dim = 32768


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * y + z)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
