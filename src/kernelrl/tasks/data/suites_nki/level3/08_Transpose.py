"""Transpose of a 2-D tensor."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/08_Transpose",
    "level": 3,
    "tags": ["transpose", "layout"],
}

rows = 256
cols = 384


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.T.contiguous()


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
