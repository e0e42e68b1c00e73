"""Hard swish: x * relu6(x + 3) / 6."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/11_HardSwish",
    "level": 1,
    "tags": ["elementwise", "activation"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 192
dim = 32768


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
