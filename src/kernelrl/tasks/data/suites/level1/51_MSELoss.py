"""Mean squared error between predictions and targets."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/51_MSELoss",
    "level": 1,
    "tags": ["loss", "reduction"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 192
dim = 32768


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
