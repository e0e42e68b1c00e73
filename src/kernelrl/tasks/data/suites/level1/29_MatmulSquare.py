"""Product of two square matrices."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/29_MatmulSquare",
    "level": 1,
    "tags": ["matmul"],
    "profiles": {"gpu": {"n": 4096}},
}

n = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(n, n), torch.randn(n, n)]


def get_init_inputs():
    return []
