"""Matrix-vector product."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/32_MatVec",
    "level": 1,
    "tags": ["matmul", "memory-bound"],
    "profiles": {"gpu": {"m": 32768, "k": 8192}},
}

m = 4096
k = 2048


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.mv(a, v)


def get_inputs():
    return [torch.randn(m, k), torch.randn(k)]


def get_init_inputs():
    return []
