"""Transposed 4x4 convolution with stride 2 (2x upsampling)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/38_ConvTranspose2d",
    "level": 1,
    "tags": ["conv", "transposed"],
    "profiles": {"gpu": {"batch_size": 32, "height": 128, "width": 128}},
}

batch_size = 16
in_channels = 32
out_channels = 16
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
