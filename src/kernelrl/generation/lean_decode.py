"""A lean single-token decode step for Llama-family decoders (Llama, Mistral, Qwen2).

`transformers`' forward spends most of a small model's decode step in per-call machinery (mask
construction, output capturing, hooks and kwargs plumbing) rather than in matmuls. `LeanDecoder` runs
the same modules' weights in the same order (RMSNorm, q/k/v projections, rotary embedding, attention
over the KV cache, o projection, gated MLP, final norm, LM head) with nothing else, reading and
appending the engine's cache exactly as the model would. Models it cannot reproduce exactly are
detected up front (`LeanDecoder.for_model` returns None) and keep the `transformers` forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

SUPPORTED = ("llama", "mistral", "qwen2")
STATIC_ROPE = ("default", "linear", "llama3", "yarn")  # cos/sin depend on the position only
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
        rotary = model.model.rotary_emb
        self.rope_table = getattr(rotary, "rope_type", None) in STATIC_ROPE
        self._cos: Tensor | None = None
        self._sin: Tensor | None = None
        self._stacked: dict[int, tuple[tuple[tuple[int, int], ...], Tensor, Tensor | None]] = {}

    @classmethod
    def for_model(cls, model: Any) -> LeanDecoder | None:
        """A decoder for `model`, or None when it needs the `transformers` forward."""
        return cls(model) if _unsupported(model) is None else None

    def __call__(self, ids: Tensor, mask: Tensor, positions: Tensor, cache: Any) -> Tensor:
        inner = self.model.model
        batch = ids.shape[0]
        hidden = F.embedding(ids, inner.embed_tokens.weight)  # [B, 1, H]
        cos, sin = self._rope(hidden, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [B, 1, 1, D], broadcast over heads
        keep = mask.bool()[:, None, None, :]  # [B, 1, 1, L]
        gqa = self.kv_heads != self.heads
        rotated = self.heads + self.kv_heads
        for index, layer in enumerate(inner.layers):
            attn, mlp = layer.self_attn, layer.mlp
            x = _rms_norm(layer.input_layernorm, hidden)
            weight, bias = self._qkv(index, attn)
            qkv = F.linear(x, weight, bias).view(batch, 1, rotated + self.kv_heads, self.head_dim).transpose(1, 2)
            qk = _apply_rope(qkv[:, :rotated], cos, sin)  # q and k heads rotated together
            keys, values = cache.update(qk[:, self.heads:], qkv[:, rotated:], index)
            out = F.scaled_dot_product_attention(qk[:, : self.heads], keys, values, attn_mask=keep, scale=self.scale,
                                                 enable_gqa=gqa)
            hidden = hidden + F.linear(out.transpose(1, 2).reshape(batch, 1, -1), attn.o_proj.weight, attn.o_proj.bias)
            x = _rms_norm(layer.post_attention_layernorm, hidden)
            gate = F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias)
            up = F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias)
            hidden = hidden + F.linear(mlp.act_fn(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)
        last = _rms_norm(inner.norm, hidden)[:, -1]
        head = self.model.lm_head
        return F.linear(last, head.weight, head.bias)

    def _qkv(self, index: int, attn: Any) -> tuple[Tensor, Tensor | None]:
        """The q, k and v projections stacked into one ``[(H + 2 KV) * D, hidden]`` weight (and bias),
        rebuilt whenever a parameter changed (tensor version counters move on every in-place update)."""
        parts = [attn.q_proj, attn.k_proj, attn.v_proj]
        tensors = [t for m in parts for t in (m.weight, m.bias) if t is not None]
        key = tuple((id(t), t._version) for t in tensors)
        cached = self._stacked.get(index)
        if cached is None or cached[0] != key:
            bias = None if parts[0].bias is None else torch.cat([m.bias for m in parts])
            cached = (key, torch.cat([m.weight for m in parts]), bias)
            self._stacked[index] = cached
        return cached[1], cached[2]

    def _rope(self, hidden: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos, sin ``[B, 1, D]`` for ``positions [B, 1]``: rows of a table the rotary module filled once
        (same values: each entry is one product inv_freq * position) for position-only RoPE types."""
        rotary = self.model.model.rotary_emb
        if not self.rope_table:
            return rotary(hidden, positions)
        need = int(positions.max()) + 1
        if self._cos is None or self._cos.shape[0] < need or self._cos.dtype != hidden.dtype:
            size = max(need, 2 * (self._cos.shape[0] if self._cos is not None else 64))
            cos, sin = rotary(hidden, torch.arange(size, device=hidden.device).unsqueeze(0))
            self._cos, self._sin = cos[0], sin[0]
        assert self._sin is not None
        return self._cos[positions], self._sin[positions]


def _apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding in the half-split convention of Llama, Mistral and Qwen2 (Su et al. 2021, eq. 34):
    ``x * cos + rotate_half(x) * sin`` with ``rotate_half([x1, x2]) = [-x2, x1]``. x ``[B, heads, 1, D]``."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _rms_norm(norm: Any, x: Tensor) -> Tensor:
    """The module's RMSNorm as one fused op for float32 (the module itself otherwise)."""
    eps = getattr(norm, "variance_epsilon", None)
    if x.dtype != torch.float32 or eps is None or getattr(norm, "weight", None) is None:
        return norm(x)
    return F.rms_norm(x, (x.shape[-1],), norm.weight, eps)
