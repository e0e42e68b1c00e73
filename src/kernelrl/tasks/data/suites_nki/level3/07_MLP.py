"""Two-layer MLP relu(x @ w1) @ w2."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/07_MLP",
    "level": 3,
    "tags": ["matmul", "fused", "mlp"],
    "rtol": 1e-3, "atol": 1e-3,
}

M = 256
K = 256
H = 256
N = 512


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w1) @ w2


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, H) / 16, torch.randn(H, N) / 16]


def get_init_inputs():
    return []
