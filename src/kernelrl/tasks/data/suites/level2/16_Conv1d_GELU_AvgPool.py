"""1-D convolution (kernel 3, padding 1), GELU, average pooling by 2."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/16_Conv1d_GELU_AvgPool",
    "level": 2,
    "tags": ["conv", "pooling", "fused"],
    "profiles": {"gpu": {"batch_size": 128, "in_channels": 128, "out_channels": 256, "length": 8192}},
}

batch_size = 16
in_channels = 32
out_channels = 64
length = 1024


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool1d(F.gelu(self.conv(x)), 2)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
