"""Batched matrix product."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/31_BatchedMatmul",
    "level": 1,
    "tags": ["matmul", "batched"],
    "profiles": {"gpu": {"batch_size": 128, "m": 512, "k": 512, "n": 512}},
}

batch_size = 48
m = 128
k = 128
n = 128


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
