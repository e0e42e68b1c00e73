"""Matrix product A.T @ B with A stored K x M."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/02_MatmulTransposedA",
    "level": 3,
    "tags": ["matmul"],
    "rtol": 1e-3, "atol": 1e-3,
}

M = 256
K = 256
N = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.T @ b


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []
