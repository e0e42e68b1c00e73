"""Layer normalisation over the last dim, no affine, eps 1e-5."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/06_LayerNorm",
    "level": 2,
    "tags": ["reduction", "normalization"],
}

batch_size = 256
dim = 384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (x.shape[1],), eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
