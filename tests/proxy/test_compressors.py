"""Round trips and properties of every compressed view."""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest
import torch

from kernelrl.proxy.compressors import COMPRESSORS, make_compressor
from kernelrl.proxy.compressors.arith import BOS
from kernelrl.proxy.compressors.arith_coder import (
    ArithmeticDecoder,
    ArithmeticEncoder,
    bits_to_bytes,
    bytes_to_bits,
)


def random_bytes(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(n))


def test_registry_lists_all_three_and_rejects_unknown_names() -> None:
    assert {"gzip", "tokenizer", "arith"} <= set(COMPRESSORS.names())
    with pytest.raises(KeyError, match=r"unknown compressor 'zstd'.*arith.*gzip.*tokenizer"):
        make_compressor("zstd")
    with pytest.raises(ValueError, match="bad options for compressor 'gzip'"):
        make_compressor("gzip", {"level": 12})
    with pytest.raises(ValueError, match="window_bits=36 must be a multiple of 8"):
        make_compressor("arith", {"window_bits": 36})


def test_arithmetic_coder_round_trip_and_exact_length() -> None:
    rng = np.random.default_rng(0)
    for trial in range(20):
        n_sym = int(rng.integers(2, 300))
        freqs = rng.integers(1, 65536 // n_sym, size=(50, n_sym))
        freqs[:, 0] = 1  # some near-impossible symbols
        cums = np.concatenate([np.zeros((50, 1), dtype=np.int64), np.cumsum(freqs, axis=1)], axis=1)
        msg = [int(rng.integers(0, n_sym)) for _ in range(50)]
        enc = ArithmeticEncoder()
        for cum, s in zip(cums, msg, strict=True):
            enc.encode(int(cum[s]), int(cum[s + 1]), int(cum[-1]))
        predicted = enc.length_if_finished()
        bits = enc.finish()
        assert len(bits) == predicted
        padded = bytes_to_bits(bits_to_bytes(bits))  # zero padding must not matter
        dec = ArithmeticDecoder(padded)
        assert [dec.decode(cum) for cum in cums] == msg, trial


def test_gzip_round_trip_and_determinism(code_docs: list[bytes]) -> None:
    comp = make_compressor("gzip")
    for data in [b"", random_bytes(1, 1000), *code_docs[:20]]:
        blob = comp.compress(data)
        assert comp.decompress(blob) == data
        assert blob == comp.compress(data)
        assert blob[4:8] == b"\0\0\0\0"  # mtime field
        assert gzip.decompress(blob) == data  # a standard gzip stream
    big = b"".join(code_docs)
    assert len(comp.compress(big)) < len(big) / 2


def test_tokenizer_round_trip_on_code_and_arbitrary_bytes(code_docs: list[bytes]) -> None:
    comp = make_compressor("tokenizer", {"vocab_size": 600})
    with pytest.raises(RuntimeError, match="before fit"):
        comp.compress(b"x")
    assert comp.fit(code_docs)["vocab_size"] > 256
    assert comp.symbol_vocab > 256
    samples = [b"", bytes(range(256)), random_bytes(2, 3000), "naïve → ∑".encode(), *code_docs[:30]]
    for data in samples:
        blob = comp.compress(data)
        ids = comp.symbols(data)
        assert len(blob) == 2 * len(ids)
        assert ids.min(initial=0) >= 0 and ids.max(initial=0) < comp.symbol_vocab
        assert comp.decompress(blob) == data
    text = b"".join(code_docs[:50])
    assert len(comp.symbols(text)) < len(text) / 2  # BPE merges really compress code
    with pytest.raises(ValueError, match="2 bytes per id"):
        comp.decompress(b"abc")
    batch = comp.symbols_many(code_docs[:5])
    assert all(np.array_equal(a, comp.symbols(d)) for a, d in zip(batch, code_docs[:5], strict=True))


def test_arith_round_trip_and_compression(trained_arith, code_docs: list[bytes]) -> None:
    comp, info = trained_arith
    assert info["m1_train_steps"] == 80 and info["m1_final_train_bits_per_byte"] < 6.0
    docs = [*code_docs[:12], b"a", random_bytes(3, 90), bytes(range(256))[:40]]
    views = comp.symbols_many(docs)
    size = comp.options.window_bits // 8
    for data, view in zip(docs, views, strict=True):
        blob = comp.compress(data)
        assert np.array_equal(np.frombuffer(blob, dtype=np.uint8), view)  # batched == single
        assert len(blob) % size == 0
        assert comp.decompress(blob) == data
    code = b"".join(code_docs[:12])
    packed = sum(len(v) for v in views[:12])
    assert packed < len(code)  # the trained M1 compresses code below 8 bits per byte


def test_arith_equal_info_windows_decode_on_their_own(trained_arith, code_docs: list[bytes]) -> None:
    comp, _ = trained_arith
    data = b"".join(code_docs[3:5])
    blob = comp.compress(data)
    size = comp.options.window_bits // 8
    windows = [blob[i : i + size] for i in range(0, len(blob), size)]
    assert len(windows) > 4
    alone = [comp.decode_windows([w])[0] for w in windows]  # each window with no neighbours
    assert b"".join(alone) == data
    assert all(0 < len(piece) <= comp.options.max_window_bytes for piece in alone)
    # Equal information: a window's bytes fit its payload, and one more byte would not have fit
    # (unless the window hit its byte cap or the text ended).
    payload = comp.options.window_bits - comp.options.header_bits
    offset = 0
    for piece in alone[:-1]:
        offset += len(piece)
        if len(piece) == comp.options.max_window_bytes:
            continue
        longer = [*piece, data[offset]]
        cum = comp._cum_tables(torch.tensor([[BOS, *longer[:-1]]]))[0]
        enc = ArithmeticEncoder()
        lengths = []
        for j, s in enumerate(longer):
            enc.encode(int(cum[j, s]), int(cum[j, s + 1]), int(cum[j, -1]))
            lengths.append(enc.length_if_finished())
        assert lengths[-2] <= payload < lengths[-1]
    with pytest.raises(ValueError, match="not a multiple"):
        comp.decompress(blob[:-1])


def test_arith_before_fit_is_a_clear_error() -> None:
    comp = make_compressor("arith", {"train_steps": 0})
    with pytest.raises(RuntimeError, match="before fit"):
        comp.compress(b"abc")
    with pytest.raises(ValueError, match="shorter than one window"):
        comp.fit([b"tiny"])
