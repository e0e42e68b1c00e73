"""Linear layer, clamp to [-0.5, 0.5], mean over features."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/06_Linear_Clamp_Mean",
    "level": 2,
    "tags": ["matmul", "reduction", "fused"],
    "profiles": {"gpu": {"batch_size": 8192, "in_features": 4096, "out_features": 4096}},
}

batch_size = 512
in_features = 512
out_features = 512


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.fc(x), -0.5, 0.5).mean(dim=-1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
