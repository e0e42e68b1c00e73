"""2x2 max pooling with stride 2."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/40_MaxPool2d",
    "level": 1,
    "tags": ["pooling"],
    "profiles": {"gpu": {"batch_size": 128, "height": 256, "width": 256}},
}

batch_size = 16
channels = 32
height = 64
width = 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, 2, 2)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
