"""Square linear layer with a residual connection, then ReLU."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/04_Linear_Residual_ReLU",
    "level": 2,
    "tags": ["matmul", "residual", "fused"],
    "profiles": {"gpu": {"batch_size": 8192, "features": 4096}},
}

batch_size = 512
features = 512


class Model(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x) + x)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
