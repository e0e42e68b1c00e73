"""KL divergence between two row-wise softmax distributions given as log-probabilities."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/54_KLDivLoss",
    "level": 1,
    "tags": ["loss", "softmax"],
    "profiles": {"gpu": {"batch_size": 8192}},
}

batch_size = 512
dim = 4096


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
        return F.kl_div(log_p, log_q, reduction="batchmean", log_target=True)


def get_inputs():
    return [
        torch.log_softmax(torch.randn(batch_size, dim), -1),
        torch.log_softmax(torch.randn(batch_size, dim), -1),
    ]


def get_init_inputs():
    return []
