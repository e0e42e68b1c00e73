"""Matrix product A @ B."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/01_Matmul",
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
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
