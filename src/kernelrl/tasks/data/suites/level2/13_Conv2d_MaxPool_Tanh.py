"""3x3 convolution, 2x2 max pooling, tanh."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/13_Conv2d_MaxPool_Tanh",
    "level": 2,
    "tags": ["conv", "pooling", "fused"],
    "profiles": {
        "gpu": {"batch_size": 64, "in_channels": 64, "out_channels": 128, "height": 128, "width": 128}
    },
}

batch_size = 8
in_channels = 16
out_channels = 32
height = 64
width = 64


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(F.max_pool2d(self.conv(x), 2))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
