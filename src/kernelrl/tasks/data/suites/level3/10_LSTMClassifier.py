"""Single-layer LSTM over a sequence followed by a linear head on the last output."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/10_LSTMClassifier",
    "level": 3,
    "tags": ["recurrent", "matmul", "model"],
    "profiles": {"gpu": {"batch_size": 512, "seq_len": 512, "input_size": 256, "hidden_size": 1024}},
}

batch_size = 32
seq_len = 64
input_size = 64
hidden_size = 128
classes = 16


class Model(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, classes: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        self.head = nn.Linear(hidden_size, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, classes]
