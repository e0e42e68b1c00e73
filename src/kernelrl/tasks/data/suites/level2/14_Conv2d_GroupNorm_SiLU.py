"""3x3 convolution, group normalisation (4 groups), SiLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/14_Conv2d_GroupNorm_SiLU",
    "level": 2,
    "tags": ["conv", "norm", "fused"],
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
        self.norm = nn.GroupNorm(4, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
