"""Tall-skinny product: (m x k) @ (k x n) with m >> n."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/30_MatmulTall",
    "level": 1,
    "tags": ["matmul"],
    "profiles": {"gpu": {"m": 65536, "k": 1024, "n": 256}},
}

m = 4096
k = 256
n = 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
