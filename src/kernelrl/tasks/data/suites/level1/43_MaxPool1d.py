"""Max pooling over a sequence, window 4, stride 4."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/43_MaxPool1d",
    "level": 1,
    "tags": ["pooling"],
    "profiles": {"gpu": {"batch_size": 256, "length": 32768}},
}

batch_size = 32
channels = 64
length = 4096


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool1d(x, 4, 4)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
