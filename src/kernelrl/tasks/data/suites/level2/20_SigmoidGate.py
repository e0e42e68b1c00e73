"""Gated unit: a * sigmoid(b) with a and b the two halves of the input."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/20_SigmoidGate",
    "level": 2,
    "tags": ["elementwise", "gating", "fused"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 128
dim = 16384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return a * torch.sigmoid(b)


def get_inputs():
    return [torch.randn(batch_size, 2 * dim)]


def get_init_inputs():
    return []
