"""y = relu(x * scale + bias): three elementwise passes in eager PyTorch, one in a fused kernel."""

import torch
import torch.nn as nn

TASK_META = {"id": "example/scale_bias_relu", "level": 1, "tags": ["elementwise", "fusion"]}

batch_size = 256
features = 8192


class Model(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale + self.bias)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
