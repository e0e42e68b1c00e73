"""Each row divided by its L2 norm (plus 1e-12)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/08_L2NormalizeRows",
    "level": 2,
    "tags": ["reduction", "normalization"],
}

batch_size = 256
dim = 384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (x.norm(dim=1, keepdim=True) + 1e-12)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
