"""1x1 convolution mixing channels."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/39_PointwiseConv2d",
    "level": 1,
    "tags": ["conv", "matmul"],
    "profiles": {"gpu": {"batch_size": 64, "height": 128, "width": 128}},
}

batch_size = 8
in_channels = 64
out_channels = 128
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
