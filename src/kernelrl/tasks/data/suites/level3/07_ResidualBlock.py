"""Basic residual block: conv-BN-ReLU-conv-BN plus identity, then ReLU."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/07_ResidualBlock",
    "level": 3,
    "tags": ["conv", "norm", "residual", "cnn", "model"],
    "profiles": {"gpu": {"batch_size": 128, "channels": 128, "height": 64, "width": 64}},
}

batch_size = 8
channels = 32
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
