"""Linear layer, GELU, then multiplication by a constant."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/02_Linear_GELU_Scale",
    "level": 2,
    "tags": ["matmul", "activation", "fused"],
    "profiles": {"gpu": {"batch_size": 8192, "in_features": 4096, "out_features": 4096}},
}

batch_size = 512
in_features = 512
out_features = 512


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x)) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 0.5]
