"""A GRU cell unrolled over a sequence; returns the last hidden state."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/09_GRUSequence",
    "level": 3,
    "tags": ["recurrent", "matmul", "model"],
    "profiles": {"gpu": {"batch_size": 1024, "seq_len": 256, "input_size": 512, "hidden_size": 1024}},
}

batch_size = 64
seq_len = 32
input_size = 128
hidden_size = 256


class Model(nn.Module):
    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(input_size, hidden_size)
        self.hidden_size = hidden_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], self.hidden_size)
        for step in range(x.shape[1]):
            h = self.cell(x[:, step], h)
        return h


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
