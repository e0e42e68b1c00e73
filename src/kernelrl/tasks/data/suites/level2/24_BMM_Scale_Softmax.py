"""Batched q @ k^T, scaling, softmax."""

import math

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/24_BMM_Scale_Softmax",
    "level": 2,
    "tags": ["matmul", "softmax", "attention", "fused"],
    "profiles": {"gpu": {"batch_size": 256, "seq_len": 2048, "head_dim": 128}},
}

batch_size = 16
seq_len = 256
head_dim = 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, head_dim), torch.randn(batch_size, seq_len, head_dim)]


def get_init_inputs():
    return []
