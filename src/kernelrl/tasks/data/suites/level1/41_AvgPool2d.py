"""3x3 average pooling, stride 2, padding 1."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/41_AvgPool2d",
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
        return F.avg_pool2d(x, 3, stride=2, padding=1)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
