"""Division by a constant, clamp, then Mish."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/21_Div_Clamp_Mish",
    "level": 2,
    "tags": ["elementwise", "activation", "fused"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 128
dim = 32768


class Model(nn.Module):
    def __init__(self, divisor: float) -> None:
        super().__init__()
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(torch.clamp(x / self.divisor, -3.0, 3.0))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1.7]
