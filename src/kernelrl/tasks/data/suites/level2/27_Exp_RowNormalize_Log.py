"""exp, divide by the row sum, log: an explicit log-softmax."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/27_Exp_RowNormalize_Log",
    "level": 2,
    "tags": ["softmax", "elementwise", "fused"],
    "profiles": {"gpu": {"batch_size": 4096}},
}

batch_size = 256
dim = 8192


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return torch.log(e / e.sum(dim=-1, keepdim=True))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
