"""Scale attention scores, apply a causal mask, softmax over keys."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/23_Scale_CausalMask_Softmax",
    "level": 2,
    "tags": ["softmax", "attention", "mask", "fused"],
    "profiles": {"gpu": {"batch_size": 128, "seq_len": 2048}},
}

batch_size = 16
seq_len = 256


class Model(nn.Module):
    def __init__(self, seq_len: int) -> None:
        super().__init__()
        self.register_buffer("mask", torch.ones(seq_len, seq_len, dtype=torch.bool).tril())

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        scores = scores * 0.125
        scores = scores.masked_fill(~self.mask, float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, seq_len)]


def get_init_inputs():
    return [seq_len]
