"""A small byte-level decoder-only transformer (pre-norm, RoPE, causal SDPA).

Ids 0..255 are raw bytes; any further ids (sentinels, compressed symbols with their own
embeddings) follow. An optional raw-byte head predicts the next raw byte with its own 256-way
projection; without it the raw-byte distribution is the main head restricted to ids 0..255.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from kernelrl.config_system import ConfigModel

N_BYTES = 256


class ModelConfig(ConfigModel):
    """Shape of a `ByteLM`. `vocab_size` is filled in from the data layout."""

    d_model: int = Field(128, ge=8)
    n_layers: int = Field(4, ge=1)
    n_heads: int = Field(4, ge=1)
    ff_mult: int = Field(4, ge=1)
    max_len: int = Field(512, ge=8)
    raw_head: bool = False
    vocab_size: int = Field(N_BYTES, ge=N_BYTES)

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model: d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size (RoPE)"
            )
        return self


class LMOutput(NamedTuple):
    """`logits`: [B, T, vocab_size]; `raw_logits`: [B, T, 256] from the raw-byte head, or None."""

    logits: torch.Tensor
    raw_logits: torch.Tensor | None


def rope_tables(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables of shape [max_len, head_dim // 2] for rotary position embeddings."""
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (2i, 2i+1) as complex numbers. x: [B, H, T, D]; rot: complex [T, D/2]."""
    real = x if x.dtype in (torch.float32, torch.float64) else x.float()
    pairs = torch.view_as_complex(real.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * rot).flatten(-2).to(x.dtype)


class Block(nn.Module):
    """Pre-norm attention + MLP block."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(
            nn.Linear(d, cfg.ff_mult * d, bias=False), nn.GELU(), nn.Linear(cfg.ff_mult * d, d, bias=False)
        )

    def forward(self, x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
        """x: [B, T, d] -> [B, T, d]; rot: complex RoPE factors [T, head_dim / 2]."""
        b, t, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, t, 3, self.n_heads, d // self.n_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        q, k = apply_rope(q, rot), apply_rope(k, rot)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


class ByteLM(nn.Module):
    """Decoder-only transformer over byte ids (plus extra ids beyond 255)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.raw_head = nn.Linear(cfg.d_model, N_BYTES, bias=False) if cfg.raw_head else None
        cos, sin = rope_tables(cfg.d_model // cfg.n_heads, cfg.max_len)
        self.register_buffer("rope_cos", cos.float(), persistent=False)
        self.register_buffer("rope_sin", sin.float(), persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> LMOutput:
        """ids: [B, T] int64 with T <= max_len -> logits [B, T, V] (and raw logits [B, T, 256])."""
        t = ids.shape[1]
        if t > self.cfg.max_len:
            raise ValueError(f"sequence length {t} exceeds model max_len {self.cfg.max_len}")
        x = self.embed(ids)
        real = torch.float64 if x.dtype == torch.float64 else torch.float32
        rot = torch.complex(self.rope_cos[:t].to(real), self.rope_sin[:t].to(real))
        for block in self.blocks:
            x = block(x, rot)
        x = self.norm(x)
        raw = self.raw_head(x) if self.raw_head is not None else None
        return LMOutput(self.head(x), raw)


def raw_byte_logprobs(out: LMOutput) -> torch.Tensor:
    """Log-probabilities (float64) over the 256 raw bytes, [B, T, 256].

    From the raw-byte head when present, else the main head renormalised over ids 0..255
    (the model knows it is reading raw bytes, so other ids are excluded).
    """
    logits = out.raw_logits if out.raw_logits is not None else out.logits[..., :N_BYTES]
    return torch.log_softmax(logits.double(), dim=-1)


def count_params(cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts: `embedding` (input table) and `compute` (everything a token multiplies through)."""
    d, ff, layers = cfg.d_model, cfg.ff_mult * cfg.d_model, cfg.n_layers
    per_layer = 3 * d * d + d * d + 2 * d * ff + 4 * d
    head = d * cfg.vocab_size + (d * N_BYTES if cfg.raw_head else 0)
    return {"embedding": cfg.vocab_size * d, "compute": layers * per_layer + 2 * d + head}


def train_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token: 6 * compute params + 6 * layers * context * d (Kaplan et al. 2020).

    The input embedding is a lookup and is not counted; the output head(s) are.
    """
    return 6.0 * count_params(cfg)["compute"] + 6.0 * cfg.n_layers * seq_len * cfg.d_model

