"""Depthwise 3x3 convolution (one filter per channel)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/37_DepthwiseConv2d",
    "level": 1,
    "tags": ["conv", "depthwise"],
    "profiles": {"gpu": {"batch_size": 64, "height": 128, "width": 128}},
}

batch_size = 8
channels = 64
height = 64
width = 64


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
