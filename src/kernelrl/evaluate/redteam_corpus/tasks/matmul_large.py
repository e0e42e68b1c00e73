"""c = a @ b, large enough (~2 ms on one core) that where its time goes can be measured by sampling."""

import torch
import torch.nn as nn

m = 1024
k = 512
n = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
