"""Instance normalisation (per sample and channel), no affine parameters."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/27_InstanceNorm2d",
    "level": 1,
    "tags": ["norm"],
    "profiles": {"gpu": {"batch_size": 64, "height": 256, "width": 256}},
}

batch_size = 16
channels = 32
height = 64
width = 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.instance_norm(x, eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
