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
    else:  # pragma: no cover - real checkpoints are for GPU presets
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(cfg.name)
        model = AutoModelForCausalLM.from_pretrained(cfg.name, dtype=getattr(torch, cfg.dtype))
    return model.to(cfg.device), tok


def encode_prompt(tok: Any, text: str) -> list[int]:
    return [tok.bos_token_id, *tok.encode(text, add_special_tokens=False)]


def encode_answer(tok: Any, text: str) -> list[int]:
    return [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]


def clone_model(model: Any) -> Any:
    """A frozen copy (reference / teacher), in eval mode."""
    import copy

    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
