"""Embedding table lookup."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/48_Embedding",
    "level": 1,
    "tags": ["gather", "embedding"],
    "profiles": {"gpu": {"batch_size": 512, "seq_len": 1024, "vocab": 32768, "dim": 1024}},
}

batch_size = 64
seq_len = 320
vocab = 8192
dim = 256


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len))]


def get_init_inputs():
    return [vocab, dim]
