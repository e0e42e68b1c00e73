"""Mobile inverted bottleneck: expand 1x1, depthwise 3x3, project 1x1, residual."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/08_InvertedResidual",
    "level": 3,
    "tags": ["conv", "depthwise", "residual", "cnn", "model"],
    "profiles": {"gpu": {"batch_size": 128, "channels": 64, "height": 112, "width": 112}},
}

batch_size = 8
channels = 32
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        hidden = channels * 4
        self.block = nn.Sequential(
            nn.Conv2d(channels, hidden, 1),
            nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, channels, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
