"""One validated config object per proxy-compression run, loaded by `kernelrl.config_system` like every other:
preset, YAML file, `key=value` overrides, one validation naming each bad field."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from kernelrl import config_system as _config
from kernelrl.config_system import ConfigModel
from kernelrl.proxy.compressors import (
    COMPRESSORS,
    ArithOptions,
    CompressorOptions,
    GzipOptions,
    TokenizerOptions,
)
from kernelrl.proxy.corpus import CorpusConfig
from kernelrl.proxy.mixing import EmbeddingMode, MixConfig
from kernelrl.proxy.model import ModelConfig
from kernelrl.proxy.train import ArmTrainingConfig

BASELINE = "bytes"
# A model trained on the tokenizer's ids only (no raw bytes), scored as bits per raw byte.
TOKENS_ONLY = "tokenizer-only"


class ProxyConfig(ConfigModel):
    """Everything that decides a run's result. `arms`: "bytes" (byte-only baseline), compressor names
    (byte LMs trained on that view plus raw bytes) or "tokenizer-only" (a model of the BPE ids alone)."""

    preset: str = "custom"
    seed: int = 0
    threads: int | Literal["auto"] = Field(
        "auto", description="torch threads; auto = idle cores now (oversubscribed threads are much slower)"
    )
    arms: list[str] = Field(default_factory=lambda: [BASELINE, "tokenizer", "arith"])
    embeddings: EmbeddingMode = "auto"
    roundtrip_check_docs: int = Field(16, ge=0, description="validation docs decoded back per compressor")
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: ArmTrainingConfig = Field(default_factory=lambda: ArmTrainingConfig(budget_tokens=1_000_000))
    mix: MixConfig = Field(default_factory=MixConfig)
    gzip: GzipOptions = Field(default_factory=GzipOptions)
    tokenizer: TokenizerOptions = Field(default_factory=TokenizerOptions)
    arith: ArithOptions = Field(default_factory=ArithOptions)

    @model_validator(mode="after")
    def _check(self) -> ProxyConfig:
        if not self.arms:
            raise ValueError("arms: is empty; list 'bytes' and/or compressor names")
        if len(set(self.arms)) != len(self.arms):
            raise ValueError(f"arms: has duplicates: {self.arms}")
        for arm in self.arms:
            if arm not in (BASELINE, TOKENS_ONLY) and arm not in COMPRESSORS:
                known = ", ".join([BASELINE, TOKENS_ONLY, *COMPRESSORS.names()])
                raise ValueError(f"arms: unknown compressor {arm!r}; known: {known}")
        if TOKENS_ONLY in self.arms and self.embeddings == "shared":
            raise ValueError(f"embeddings: arm {TOKENS_ONLY!r} reads token ids and needs embeddings 'auto' or 'separate'")
        if self.model.max_len < self.train.seq_len:
            raise ValueError(f"model.max_len: must be >= train.seq_len (model.max_len={self.model.max_len} < "
                             f"train.seq_len={self.train.seq_len})")
        return self

    def options_for(self, compressor: str) -> CompressorOptions:
        """The options section for `compressor` (aliases resolve to the same section)."""
        cls = COMPRESSORS.get(compressor)
        for section in (self.gzip, self.tokenizer, self.arith):
            if isinstance(section, cls.Options):
                return section
        return cls.Options()

    def resolve_threads(self) -> int:
        """Threads to use: the configured number, or for `auto` the cores not busy right now (>= 1)."""
        if self.threads != "auto":
            if self.threads < 1:
                raise ValueError("threads must be >= 1 or 'auto'")
            return self.threads
        cpus = os.cpu_count() or 1
        busy = round(os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0
        return max(1, min(cpus, cpus - busy))


PRESETS: dict[str, dict[str, Any]] = {
    # Seconds: exercises every arm and code path on a few kilobytes; numbers mean nothing.
    "smoke": {
        "arms": [BASELINE, "gzip", "tokenizer", "arith"],
        "roundtrip_check_docs": 4,
        "corpus": {"sources": ["stdlib"], "max_train_bytes": 24_000, "max_val_bytes": 3_000, "chunk_bytes": 128},
        "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 64},
        "train": {"seq_len": 64, "batch_size": 4, "budget_tokens": 3_000, "n_evals": 2, "warmup_steps": 2},
        "tokenizer": {"vocab_size": 320},
        "arith": {
            "window_bits": 32, "max_window_bytes": 15, "d_model": 16, "n_layers": 1, "n_heads": 1,
            "train_steps": 10, "batch_size": 8,
        },
    },
    # The byte-only baseline against the tokenizer and neural (arith) proxies: about 7.5 CPU-minutes,
    # so minutes on two idle cores and within 20 on a shared, busy pair. Add gzip with
    # `--set "arms=[bytes, tokenizer, arith, gzip]"` (about 2.5 CPU-minutes more).
    "tiny-cpu": {
        "arms": [BASELINE, "tokenizer", "arith"],
        "corpus": {"max_train_bytes": 1_200_000, "max_val_bytes": 48_000, "chunk_bytes": 256},
        "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "max_len": 512},
        "train": {"seq_len": 512, "batch_size": 8, "budget_tokens": 1_200_000, "n_evals": 6, "lr": 2e-3},
        "tokenizer": {"vocab_size": 1024},
        "arith": {"window_bits": 64, "max_window_bytes": 31, "train_steps": 300, "batch_size": 32},
    },
}


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` laid over `base`, recursing into nested dicts (`kernelrl.config_system.merge`)."""
    return _config.merge(base, extra)


def parse_override(text: str) -> dict[str, Any]:
    """`"train.lr=1e-3"` -> `{"train": {"lr": 0.001}}` (value parsed as YAML)."""
    return _config.parse_overrides([text])


def build_config(
    preset: str | None = None, yaml_path: str | Path | None = None, overrides: list[str] | None = None
) -> ProxyConfig:
    """Preset, then YAML file, then overrides, validated once (`kernelrl.config_system`); a `ConfigError` naming
    each bad field otherwise."""
    presets = {name: {"preset": name, **body} for name, body in PRESETS.items()}
    stack = _config.layers(preset, yaml_path, overrides, presets)
    data = _config.flatten(stack)
    # A token budget in the preset and a FLOP budget from an override: the later one wins.
    train = data.get("train", {})
    if isinstance(train, dict) and train.get("budget_flops") is not None and any(
        "budget_flops" in o for o in overrides or []
    ):
        train["budget_tokens"] = None
    return _config.validate(ProxyConfig, data, "proxy config", stack)
