"""Linear classifier head followed by the cross-entropy loss."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level2/29_Linear_CrossEntropy",
    "level": 2,
    "tags": ["matmul", "loss", "softmax", "fused"],
    "profiles": {"gpu": {"batch_size": 16384, "in_features": 1024, "num_classes": 32000}},
}

batch_size = 1024
in_features = 256
num_classes = 512


class Model(nn.Module):
    def __init__(self, in_features: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.fc(x), labels)


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return [in_features, num_classes]
