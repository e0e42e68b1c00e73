"""c = a @ b (a plain matmul; tall enough that sampling 64 rows of the output skips most of them)."""

import torch
import torch.nn as nn

m = 512
k = 128
n = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
