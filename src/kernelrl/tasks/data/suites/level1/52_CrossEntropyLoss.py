"""Cross-entropy of logits against integer class labels (mean over the batch)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/52_CrossEntropyLoss",
    "level": 1,
    "tags": ["loss", "softmax"],
    "profiles": {"gpu": {"batch_size": 16384, "num_classes": 32000}},
}

batch_size = 4096
num_classes = 1000


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
