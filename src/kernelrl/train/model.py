"""Model and tokenizer for a run: the tiny local pair (nothing downloaded) or a Hugging Face name."""

from __future__ import annotations

from typing import Any

import torch

from kernelrl.train.config import ModelConfig


def build_model(cfg: ModelConfig, corpus: list[str], seed: int) -> tuple[Any, Any]:
    """(model, tokenizer): ``tiny`` trains a byte-level BPE on `corpus` and initialises a small Llama."""
    if cfg.name == "tiny":
        from kernelrl.generation.tiny import build_tiny_causal_lm, build_tiny_tokenizer

        tok = build_tiny_tokenizer(corpus, vocab_size=cfg.vocab_size)
        model = build_tiny_causal_lm(len(tok), hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                                     num_heads=cfg.num_heads, max_position_embeddings=cfg.max_positions,
                                     initializer_range=0.02, seed=seed)
    else:  # a Hub name or a local checkpoint directory
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(cfg.name)
        model = AutoModelForCausalLM.from_pretrained(cfg.name, dtype=getattr(torch, cfg.dtype))
        if tok.pad_token_id is None:  # many chat models ship without one; padding positions are masked anyway
            tok.pad_token = tok.eos_token
    return model.to(cfg.device), tok


def encode_prompt(tok: Any, text: str) -> list[int]:
    """Prompt ids: BOS (when the tokenizer has one; Qwen's has none) and the text."""
    bos = [] if tok.bos_token_id is None else [tok.bos_token_id]
    return [*bos, *tok.encode(text, add_special_tokens=False)]


def encode_answer(tok: Any, text: str) -> list[int]:
    return [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]


def clone_model(model: Any) -> Any:
    """A frozen copy (reference / teacher), in eval mode."""
    import copy

    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
