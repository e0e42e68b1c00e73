"""Compressed views of raw bytes, one registry (`COMPRESSORS`): gzip, tokenizer (BPE), arith."""

from kernelrl.proxy.compressors import arith, bpe, gzip_view
from kernelrl.proxy.compressors.arith import ArithCompressor, ArithOptions
from kernelrl.proxy.compressors.base import COMPRESSORS, Compressor, CompressorOptions, make_compressor
from kernelrl.proxy.compressors.bpe import TokenizerCompressor, TokenizerOptions
from kernelrl.proxy.compressors.gzip_view import GzipCompressor, GzipOptions

__all__ = [
    "COMPRESSORS",
    "ArithCompressor",
    "ArithOptions",
    "Compressor",
    "CompressorOptions",
    "GzipCompressor",
    "GzipOptions",
    "TokenizerCompressor",
    "TokenizerOptions",
    "arith",
    "bpe",
    "gzip_view",
    "make_compressor",
]
