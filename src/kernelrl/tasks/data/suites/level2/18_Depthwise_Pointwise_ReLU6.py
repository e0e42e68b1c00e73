"""Depthwise 3x3 then pointwise 1x1 convolution, ReLU6."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/18_Depthwise_Pointwise_ReLU6",
    "level": 2,
    "tags": ["conv", "depthwise", "fused"],
    "profiles": {"gpu": {"batch_size": 64, "height": 128, "width": 128}},
}

batch_size = 8
in_channels = 32
out_channels = 64
height = 64
width = 64


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(in_channels, in_channels, 3, padding=1, groups=in_channels)
        self.pw = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(self.pw(self.dw(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
