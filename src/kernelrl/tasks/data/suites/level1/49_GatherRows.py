"""Gather along the last dimension with an index tensor."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level1/49_GatherRows",
    "level": 1,
    "tags": ["gather", "index"],
    "profiles": {"gpu": {"batch_size": 4096, "dim": 32768, "picks": 16384}},
}

batch_size = 256
dim = 8192
picks = 4096


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, -1, idx)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randint(0, dim, (batch_size, picks))]


def get_init_inputs():
    return []
