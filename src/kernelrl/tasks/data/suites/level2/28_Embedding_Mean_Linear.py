"""Embedding lookup, mean over the sequence, linear head."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/28_Embedding_Mean_Linear",
    "level": 2,
    "tags": ["gather", "reduction", "matmul", "fused"],
    "profiles": {"gpu": {"batch_size": 1024, "seq_len": 512, "vocab": 32768, "dim": 1024}},
}

batch_size = 128
seq_len = 128
vocab = 8192
dim = 256
classes = 64


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int, classes: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.table(ids).mean(dim=1))


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len))]


def get_init_inputs():
    return [vocab, dim, classes]
