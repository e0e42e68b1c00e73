"""Proxy compression: byte-level code LMs trained mostly on compressed views, evaluated on raw bytes.

One model reads raw UTF-8 bytes and compressed views of the same documents (gzip, a BPE tokenizer,
neural arithmetic coding with equal-info windows after Lester et al. 2024), tagged with sentinels;
at inference it reads raw bytes only ("proxy compression", Zheng et al. 2026). `kernelrl repro proxy`
(`kernelrl.repro.proxy`) sweeps model sizes against byte-only and tokenizer-only baselines.
"""

from kernelrl.proxy.compressors import COMPRESSORS, Compressor, make_compressor
from kernelrl.proxy.config import BASELINE, PRESETS, TOKENS_ONLY, ProxyConfig, build_config
from kernelrl.proxy.corpus import Corpus, CorpusConfig, chunk_document, load_corpus
from kernelrl.proxy.evaluate import bits_per_byte, evaluate_bpb, evaluate_symbol_bpb
from kernelrl.proxy.mixing import (
    MixConfig,
    MixedStream,
    VocabLayout,
    make_layout,
    pack_eval,
    pack_eval_symbols,
    wrap_compressed,
    wrap_raw,
)
from kernelrl.proxy.model import ByteLM, LMOutput, ModelConfig, raw_byte_logprobs, train_flops_per_token
from kernelrl.proxy.train import ArmResult, ArmTrainingConfig, train_arm

__all__ = [
    "BASELINE",
    "COMPRESSORS",
    "PRESETS",
    "TOKENS_ONLY",
    "ArmResult",
    "ArmTrainingConfig",
    "ByteLM",
    "Compressor",
    "Corpus",
    "CorpusConfig",
    "LMOutput",
    "MixConfig",
    "MixedStream",
    "ModelConfig",
    "ProxyConfig",
    "VocabLayout",
    "bits_per_byte",
    "build_config",
    "chunk_document",
    "evaluate_bpb",
    "evaluate_symbol_bpb",
    "load_corpus",
    "make_compressor",
    "make_layout",
    "pack_eval",
    "pack_eval_symbols",
    "raw_byte_logprobs",
    "train_arm",
    "train_flops_per_token",
    "wrap_compressed",
    "wrap_raw",
]
