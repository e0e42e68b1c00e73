"""a @ b.T with b stored row-major as (n x k)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/33_MatmulTransposedB",
    "level": 1,
    "tags": ["matmul"],
    "profiles": {"gpu": {"m": 4096, "k": 4096, "n": 4096}},
}

m = 512
k = 512
n = 384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.t()


def get_inputs():
    return [torch.randn(m, k), torch.randn(n, k)]


def get_init_inputs():
    return []
