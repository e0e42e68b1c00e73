"""Stride-2 transposed convolution, sigmoid, scaling."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/17_ConvTranspose2d_Sigmoid_Scale",
    "level": 2,
    "tags": ["conv", "transposed", "fused"],
    "profiles": {"gpu": {"batch_size": 64, "height": 128, "width": 128}},
}

batch_size = 12
in_channels = 32
out_channels = 16
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.deconv(x)) * 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
