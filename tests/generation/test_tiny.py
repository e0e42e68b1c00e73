import pytest
import torch

from kernelrl.generation.tiny import build_tiny_causal_lm, build_tiny_tokenizer


def test_tokenizer_round_trips_any_text(tokenizer):
    text = "__global__ void k(float* x) { x[0] = 1.0f; } // ü ∑"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert len(tokenizer) == 320


def test_tokenizer_rejects_too_small_vocab():
    with pytest.raises(ValueError, match="vocab_size"):
        build_tiny_tokenizer(["abc"], vocab_size=100)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_tiny_model_is_deterministic_and_shaped(arch):
    a = build_tiny_causal_lm(300, arch=arch, seed=3)
    b = build_tiny_causal_lm(300, arch=arch, seed=3)
    x = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        la, lb = a(x).logits, b(x).logits
    assert la.shape == (1, 3, 300)
    assert torch.equal(la, lb)
    assert not a.training


def test_tiny_model_rejects_bad_arch():
    with pytest.raises(ValueError, match="arch"):
        build_tiny_causal_lm(300, arch="mamba")  # type: ignore[arg-type]
