"""Linear layer x @ w + b followed by ReLU."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/03_MatmulBiasReLU",
    "level": 3,
    "tags": ["matmul", "fused"],
    "rtol": 1e-3, "atol": 1e-3,
}

M = 256
K = 256
N = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w + b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N) / 16, torch.randn(N)]


def get_init_inputs():
    return []
