"""Mean of 1 - cosine similarity between paired rows."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TASK_META = {
    "id": "level1/55_CosineEmbeddingDistance",
    "level": 1,
    "tags": ["loss", "reduction"],
    "profiles": {"gpu": {"batch_size": 8192}},
}

batch_size = 512
dim = 4096


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return (1.0 - F.cosine_similarity(predictions, targets, dim=-1)).mean()


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
