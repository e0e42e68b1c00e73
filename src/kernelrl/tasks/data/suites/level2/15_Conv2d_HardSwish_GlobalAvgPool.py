"""3x3 convolution, hard swish, global average pooling."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/15_Conv2d_HardSwish_GlobalAvgPool",
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
        return F.hardswish(self.conv(x)).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
