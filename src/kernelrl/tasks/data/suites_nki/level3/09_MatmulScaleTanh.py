"""tanh(alpha * (x @ w)) with alpha 0.5."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/09_MatmulScaleTanh",
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

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(0.5 * (x @ w))


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N) / 16]


def get_init_inputs():
    return []
