"""Group normalisation with 8 groups."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/26_GroupNorm",
    "level": 1,
    "tags": ["norm"],
    "profiles": {"gpu": {"batch_size": 64, "height": 128, "width": 128}},
}

batch_size = 16
channels = 64
height = 64
width = 64


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(8, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
