"""A lean single-token decode step for Llama-family decoders (Llama, Mistral, Qwen2).

`transformers`' forward spends most of a small model's decode step in per-call machinery (mask
construction, output capturing, hooks and kwargs plumbing) rather than in matmuls. `LeanDecoder` runs
the same modules' weights in the same order (RMSNorm, q/k/v projections, rotary embedding, attention
over the KV cache, o projection, gated MLP, final norm, LM head) with nothing else, reading and
appending the engine's cache exactly as the model would. Models it cannot reproduce exactly are
detected up front (`LeanDecoder.for_model` returns None) and keep the `transformers` forward.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch.nn.functional as F
from torch import Tensor

SUPPORTED = ("llama", "mistral", "qwen2")
_LAYER_PARTS = ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")
_ATTN_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP_PARTS = ("gate_proj", "up_proj", "down_proj", "act_fn")


def _unsupported(model: Any) -> str | None:
    """Why `model` cannot take the lean path, or None when it can."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED:
        return f"model type {getattr(cfg, 'model_type', None)!r} is not one of {SUPPORTED}"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(model, "lm_head") or not all(
        hasattr(inner, n) for n in ("embed_tokens", "layers", "norm", "rotary_emb")
    ):
        return "unexpected module layout"
    if getattr(cfg, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return f"attention implementation {cfg._attn_implementation!r}"
    if getattr(cfg, "use_sliding_window", False) or (
        getattr(cfg, "sliding_window", None) and cfg.sliding_window < getattr(cfg, "max_position_embeddings", 0)
    ):
        return "sliding-window attention"
    if any(getattr(cfg, name, None) for name in ("attn_logit_softcapping", "final_logit_softcapping")):
        return "logit soft-capping"
    for layer in inner.layers:
        if not all(hasattr(layer, n) for n in _LAYER_PARTS):
            return "unexpected decoder layer layout"
        attn, mlp = layer.self_attn, layer.mlp
        if not all(hasattr(attn, n) for n in _ATTN_PARTS) or not all(hasattr(mlp, n) for n in _MLP_PARTS):
            return "unexpected attention or MLP layout"
        if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
            return "query/key norms"
    return None


class LeanDecoder:
    """Last-position logits ``[B, V]`` for one new token per row, from the model's own weights.

    ``ids``, ``positions``: ``[B, 1]``; ``mask``: ``[B, L]`` (1 = real key column, the new token's
    column included); ``cache``: the model's `DynamicCache` holding ``L - 1`` columns per layer, to
    which this step appends one (as the model's own forward would).
    """

    def __init__(self, model: Any) -> None:
        reason = _unsupported(model)
        if reason is not None:
            raise ValueError(f"LeanDecoder cannot run this model: {reason}")
        self.model = model
        cfg = model.config
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        first_attn = model.model.layers[0].self_attn
        self.scale = float(getattr(first_attn, "scaling", self.head_dim**-0.5))
        module = sys.modules[type(first_attn).__module__]
        self.rotate: Callable[..., tuple[Tensor, Tensor]] = module.apply_rotary_pos_emb

    @classmethod
    def for_model(cls, model: Any) -> LeanDecoder | None:
        """A decoder for `model`, or None when it needs the `transformers` forward."""
        return cls(model) if _unsupported(model) is None else None

    def __call__(self, ids: Tensor, mask: Tensor, positions: Tensor, cache: Any) -> Tensor:
        inner = self.model.model
        batch = ids.shape[0]
        hidden = inner.embed_tokens(ids)  # [B, 1, H]
        cos, sin = inner.rotary_emb(hidden, positions)
        keep = mask.bool()[:, None, None, :]  # [B, 1, 1, L]
        gqa = self.kv_heads != self.heads
        for index, layer in enumerate(inner.layers):
            attn, mlp = layer.self_attn, layer.mlp
            x = layer.input_layernorm(hidden)
            q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias).view(batch, 1, self.heads, self.head_dim).transpose(1, 2)
            k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias).view(batch, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            v = F.linear(x, attn.v_proj.weight, attn.v_proj.bias).view(batch, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self.rotate(q, k, cos, sin)
            keys, values = cache.update(k, v, index)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=keep, scale=self.scale, enable_gqa=gqa)
            hidden = hidden + F.linear(out.transpose(1, 2).reshape(batch, 1, -1), attn.o_proj.weight, attn.o_proj.bias)
            x = layer.post_attention_layernorm(hidden)
            gate = F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias)
            up = F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias)
            hidden = hidden + F.linear(mlp.act_fn(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)
        last = inner.norm(hidden)[:, -1]
        head = self.model.lm_head
        return F.linear(last, head.weight, head.bias)
