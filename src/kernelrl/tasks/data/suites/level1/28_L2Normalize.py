"""Scale every row to unit Euclidean norm."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/28_L2Normalize",
    "level": 1,
    "tags": ["norm"],
    "profiles": {"gpu": {"batch_size": 8192}},
}

batch_size = 1024
dim = 4096


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2.0, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
