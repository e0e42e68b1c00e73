"""Shared fixtures: tiny locally built tokenizer and models (nothing is downloaded)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

from kernelrl.generation.tiny import build_tiny_causal_lm, build_tiny_tokenizer

# Tiny models are dominated by per-op overhead; on a shared 2-core machine extra threads only contend.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def llama(tokenizer):
    return build_tiny_causal_lm(len(tokenizer), arch="llama", max_position_embeddings=128)


@pytest.fixture(scope="session")
def gpt2(tokenizer):
    return build_tiny_causal_lm(len(tokenizer), arch="gpt2", max_position_embeddings=128)


@pytest.fixture(params=["llama", "gpt2"])
def model(request, llama, gpt2):
    return llama if request.param == "llama" else gpt2
