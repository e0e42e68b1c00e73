"""Global average pooling to one value per channel."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/42_GlobalAvgPool",
    "level": 1,
    "tags": ["pooling", "reduction"],
    "profiles": {"gpu": {"batch_size": 128, "height": 256, "width": 256}},
}

batch_size = 48
channels = 64
height = 64
width = 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
