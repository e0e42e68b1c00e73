"""Two conv-ReLU-maxpool stages, then a linear classifier."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/06_SmallCNN",
    "level": 3,
    "tags": ["conv", "pooling", "cnn", "model"],
    "profiles": {"gpu": {"batch_size": 256, "image_size": 224}},
}

batch_size = 16
channels = 3
image_size = 64
classes = 10


class Model(nn.Module):
    def __init__(self, channels: int, image_size: int, classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(32 * (image_size // 4) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def get_inputs():
    return [torch.randn(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels, image_size, classes]
