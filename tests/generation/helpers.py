"""Helpers shared by the generation tests."""

from __future__ import annotations


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text)["input_ids"]


PROMPTS = (
    "def add(a, b):",
    "import torch",
    "__global__ void scale(float* x, float s, int n) {",
    "x",
    "The kernel is",
    "out = torch.relu(x @ w + b)",
)
