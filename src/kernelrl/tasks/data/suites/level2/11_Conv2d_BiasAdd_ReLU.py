"""3x3 convolution, an extra per-channel bias, ReLU."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/11_Conv2d_BiasAdd_ReLU",
    "level": 2,
    "tags": ["conv", "activation", "fused"],
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
        self.shift = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) + self.shift)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
