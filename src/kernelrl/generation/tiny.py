"""Tiny, locally built tokenizers and causal LMs for tests and benchmarks (nothing is downloaded).

`build_tiny_tokenizer(texts)` trains a byte-level BPE tokenizer on a few strings, so any text
encodes; `build_tiny_causal_lm(vocab_size)` makes a randomly initialised Llama- or GPT-2-style
model with a couple of layers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
DEFAULT_TEXTS = (
    "def add(a, b):\n    return a + b\n",
    "__global__ void scale(float* x, float s, int n) { int i = threadIdx.x; if (i < n) x[i] *= s; }",
    "import torch\nout = torch.relu(x @ w + b)\n",
    "The kernel is correct and fast.",
)


def build_tiny_tokenizer(
    texts: Iterable[str] = DEFAULT_TEXTS, vocab_size: int = 320
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `texts`, with `<pad>`, `<s>`, `</s>`, `<unk>` as ids 0-3.

    The 256 byte symbols are always in the vocabulary, so `vocab_size` must be at least 260;
    merges learned from `texts` fill the rest.
    """
    if vocab_size < 260:
        raise ValueError(f"vocab_size must be >= 260 (256 bytes + 4 specials), got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS, UNK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK
    )


def build_tiny_causal_lm(
    vocab_size: int,
    *,
    arch: Literal["llama", "gpt2"] = "llama",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_position_embeddings: int = 256,
    pad_token_id: int = 0,
    bos_token_id: int = 1,
    eos_token_id: int = 2,
    initializer_range: float = 0.2,
    seed: int = 0,
) -> PreTrainedModel:
    """A randomly initialised causal LM in eval mode (float32, CPU).

    `initializer_range` defaults higher than usual so the next-token distributions are peaked
    rather than near uniform, which makes top-k/top-p filtering and stop tokens matter in tests.
    """
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
    special = {"pad_token_id": pad_token_id, "bos_token_id": bos_token_id, "eos_token_id": eos_token_id}
    if arch == "llama":
        config = LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=max(1, num_heads // 2),
            max_position_embeddings=max_position_embeddings,
            initializer_range=initializer_range,
            tie_word_embeddings=False,
            **special,
        )
        model_cls: type[PreTrainedModel] = LlamaForCausalLM
    elif arch == "gpt2":
        config = GPT2Config(
            vocab_size=vocab_size,
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=num_heads,
            n_positions=max_position_embeddings,
            initializer_range=initializer_range,
            **special,
        )
        model_cls = GPT2LMHeadModel
    else:
        raise ValueError(f"arch must be 'llama' or 'gpt2', got {arch!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    return model.eval()
