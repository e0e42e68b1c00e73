"""Gated feed-forward network with RMS pre-normalisation and a residual."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level3/02_SwiGLUFeedForward",
    "level": 3,
    "tags": ["mlp", "gating", "model"],
    "profiles": {"gpu": {"batch_size": 8192, "dim": 1024, "hidden": 4096}},
}

batch_size = 512
dim = 256
hidden = 768


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.gain
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, hidden]
