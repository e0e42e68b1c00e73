"""Fully connected layer with bias."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/34_Linear",
    "level": 1,
    "tags": ["matmul", "linear"],
    "profiles": {"gpu": {"batch_size": 4096, "in_features": 4096, "out_features": 4096}},
}

batch_size = 256
in_features = 1024
out_features = 512


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
