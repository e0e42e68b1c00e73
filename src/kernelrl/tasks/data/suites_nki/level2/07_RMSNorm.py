"""RMS normalisation over the last dim, no weight, eps 1e-6."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/07_RMSNorm",
    "level": 2,
    "tags": ["reduction", "normalization"],
}

batch_size = 256
dim = 384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-6)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
