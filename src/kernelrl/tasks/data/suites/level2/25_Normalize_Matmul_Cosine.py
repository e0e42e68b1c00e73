"""Pairwise cosine similarity matrix: normalise rows, then a @ b^T."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/25_Normalize_Matmul_Cosine",
    "level": 2,
    "tags": ["norm", "matmul", "fused"],
    "profiles": {"gpu": {"m": 16384, "n": 16384, "dim": 1024}},
}

m = 1024
n = 1024
dim = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()


def get_inputs():
    return [torch.randn(m, dim), torch.randn(n, dim)]


def get_init_inputs():
    return []
