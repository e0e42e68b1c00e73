"""Linear layer, 1-D batch normalisation (batch statistics), ReLU."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/09_Linear_BatchNorm_ReLU",
    "level": 2,
    "tags": ["matmul", "norm", "activation", "fused"],
    "profiles": {"gpu": {"batch_size": 8192, "in_features": 4096, "out_features": 4096}},
}

batch_size = 512
in_features = 512
out_features = 512


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.norm = nn.BatchNorm1d(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.fc(x)))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
