# redteam-class: kernel-not-called
# redteam-expect: rejected
# redteam-task: scaled_relu
# redteam-reason: uses-kernel
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale
