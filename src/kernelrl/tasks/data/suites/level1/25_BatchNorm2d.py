"""Batch normalisation of an image batch using batch statistics (training mode)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/25_BatchNorm2d",
    "level": 1,
    "tags": ["norm"],
    "profiles": {"gpu": {"batch_size": 64, "height": 256, "width": 256}},
}

batch_size = 16
channels = 32
height = 64
width = 64


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
