"""Patch embedding (strided conv), one transformer layer, mean pooling, classifier."""

import math

import torch
import torch.nn as nn

TASK_META = {
    "id": "level3/11_TinyViT",
    "level": 3,
    "tags": ["attention", "conv", "transformer", "model"],
    "profiles": {"gpu": {"batch_size": 128, "image_size": 224, "patch": 16, "dim": 768}},
}

batch_size = 8
image_size = 64
patch = 8
dim = 128
classes = 10


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused qkv projection (optionally causal)."""

    def __init__(self, dim: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        if self.causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class Model(nn.Module):
    def __init__(self, image_size: int, patch: int, dim: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, (image_size // patch) ** 2, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, 4)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(dim=1))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch, dim, classes]
