"""Pre-norm MLP block: x + W2 gelu(W1 layernorm(x))."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level3/01_MLPBlock",
    "level": 3,
    "tags": ["mlp", "residual", "model"],
    "profiles": {"gpu": {"batch_size": 8192, "dim": 1024, "hidden": 4096}},
}

batch_size = 512
dim = 256
hidden = 1024


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, hidden]
