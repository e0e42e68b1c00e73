"""Fully connected autoencoder: 3 encoder and 3 decoder layers with ReLU, sigmoid output."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/12_Autoencoder",
    "level": 3,
    "tags": ["mlp", "model"],
    "profiles": {"gpu": {"batch_size": 8192, "features": 4096, "bottleneck": 256}},
}

batch_size = 256
features = 784
bottleneck = 32


class Model(nn.Module):
    def __init__(self, features: int, bottleneck: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(features, 256),
            nn.ReLU(),
            nn.Linear(256, 128),
            nn.ReLU(),
            nn.Linear(128, bottleneck),
        )
        self.decoder = nn.Sequential(
            nn.Linear(bottleneck, 128),
            nn.ReLU(),
            nn.Linear(128, 256),
            nn.ReLU(),
            nn.Linear(256, features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decoder(self.encoder(x)))


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, bottleneck]
