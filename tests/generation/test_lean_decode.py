"""The lean decode step reproduces the `transformers` forward token for token."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from kernelrl.generation import Engine
from kernelrl.generation.lean_decode import LeanDecoder

from .test_fidelity import mixed_requests


@pytest.fixture(scope="module")
def qwen2(tokenizer):
    """Qwen2 differs from Llama by biases on q/k/v: the lean step must carry them."""
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
        for layer in model.model.layers:  # non-zero biases, or a dropped bias would go unnoticed
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.5)
    return model.eval()


def test_supported_models(llama, gpt2, qwen2) -> None:
    assert LeanDecoder.for_model(llama) is not None and LeanDecoder.for_model(qwen2) is not None
    assert LeanDecoder.for_model(gpt2) is None
    with pytest.raises(ValueError, match="model type 'gpt2'"):
        LeanDecoder(gpt2)
    assert Engine(gpt2, max_batch_size=2)._lean is None  # falls back to the model's forward


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lean_decode_matches_transformers(arch, llama, qwen2, tokenizer) -> None:
    model = llama if arch == "llama" else qwen2
    reqs = mixed_requests(tokenizer)  # mixed sampling settings and lengths; 3 slots, so rows join and leave
    lean = Engine(model, tokenizer, max_batch_size=3, lean_decode=True)
    plain = Engine(model, tokenizer, max_batch_size=3, lean_decode=False)
    assert lean._lean is not None and plain._lean is None
    ours, theirs = lean.generate(reqs), plain.generate(reqs)
    assert lean.stats.forward_calls == plain.stats.forward_calls
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_lean_decode_follows_in_place_weight_updates(tokenizer) -> None:
    """An optimizer updates parameters in place; the stacked q/k/v weights must follow."""
    from kernelrl.generation.tiny import build_tiny_causal_lm

    model = build_tiny_causal_lm(len(tokenizer), arch="llama", max_position_embeddings=128)
    reqs = mixed_requests(tokenizer)[:4]
    lean = Engine(model, tokenizer, max_batch_size=4, lean_decode=True)
    lean.generate(reqs)  # fills the stacked-weight cache
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.k_proj.weight.mul_(-1.5)
    lean.update_weights()
    plain = Engine(model, tokenizer, max_batch_size=4, lean_decode=False)
    for a, b in zip(lean.generate(reqs), plain.generate(reqs), strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4
