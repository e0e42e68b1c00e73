"""1-D convolution over a sequence, kernel 5, no padding."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/36_Conv1d",
    "level": 1,
    "tags": ["conv"],
    "profiles": {"gpu": {"batch_size": 128, "length": 16384}},
}

batch_size = 16
in_channels = 32
out_channels = 64
length = 2048


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
