"""Select rows of a matrix by index (with repeats)."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/50_IndexSelectRows",
    "level": 1,
    "tags": ["gather", "index"],
    "profiles": {"gpu": {"rows": 65536, "dim": 2048, "picks": 65536}},
}

rows = 8192
dim = 512
picks = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.index_select(x, 0, idx)


def get_inputs():
    return [torch.randn(rows, dim), torch.randint(0, rows, (picks,))]


def get_init_inputs():
    return []
