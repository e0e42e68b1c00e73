"""Neural arithmetic coding with equal-information windows (Lester et al. 2024).

A small byte-level model M1 (a `ByteLM` over 256 bytes plus a BOS id) gives next-byte
distributions; an integer arithmetic coder turns them into bits. Text is cut into windows that
each compress to exactly `window_bits` bits: the coder and M1's context are reset at every window
start, so each window decodes on its own. A window is `header | payload | zero padding`, where the
header holds the number of bytes in the window (the decoder's stopping rule).

Determinism: M1 runs in float64 and its logits are rounded to a 1/`logit_grid` grid before an
all-integer softmax, so encoder and decoder agree on every frequency table even though they run the
model on different batch shapes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from kernelrl.proxy.compressors.arith_coder import (
    MAX_TOTAL,
    ArithmeticDecoder,
    ArithmeticEncoder,
    bits_to_bytes,
    bytes_to_bits,
)
from kernelrl.proxy.compressors.base import COMPRESSORS, Compressor, CompressorOptions
from kernelrl.proxy.model import N_BYTES, ByteLM, ModelConfig, train_flops_per_token

BOS = N_BYTES  # M1's start-of-window id
_WEIGHT_BITS = 40
_MIN_PAYLOAD = 24  # one symbol costs at most 16 bits (+2 termination, +renormalisation slack)


class ArithOptions(CompressorOptions):
    window_bits: int = Field(64, ge=32, le=4096)
    max_window_bytes: int = Field(31, ge=1, le=4095)
    logit_grid: int = Field(32, ge=1, le=1024)
    d_model: int = Field(64, ge=8)
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(2, ge=1)
    train_steps: int = Field(300, ge=0)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(3e-3, gt=0)
    encode_batch: int = Field(256, ge=1)

    @model_validator(mode="after")
    def _fits(self) -> ArithOptions:
        if self.window_bits % 8:
            raise ValueError(f"window_bits={self.window_bits} must be a multiple of 8")
        if self.window_bits - self.header_bits < _MIN_PAYLOAD:
            raise ValueError(
                f"window_bits={self.window_bits} leaves fewer than {_MIN_PAYLOAD} payload bits "
                f"after a {self.header_bits}-bit header"
            )
        return self

    @property
    def header_bits(self) -> int:
        return self.max_window_bytes.bit_length()


def _weight_table(grid: int) -> list[int]:
    """Integer weights round(2**40 * exp(-k / grid)) for k = 0, 1, ... until they vanish."""
    out, k = [], 0
    while True:
        w = round(2.0**_WEIGHT_BITS * math.exp(-k / grid))
        if w == 0:
            return out
        out.append(w)
        k += 1


class ArithCompressor(Compressor):
    """Equal-info-window arithmetic coding driven by a small byte model; `fit` trains the model."""

    Options = ArithOptions
    options: ArithOptions

    def __init__(self, options: ArithOptions) -> None:
        super().__init__(options)
        o = options
        self.model_cfg = ModelConfig(
            d_model=o.d_model, n_layers=o.n_layers, n_heads=o.n_heads, max_len=o.max_window_bytes,
            vocab_size=N_BYTES + 1,
        )
        self.model: ByteLM | None = None
        self._table = np.asarray([*_weight_table(o.logit_grid), 0], dtype=np.int64)  # last: "vanished"

    # --- M1 -----------------------------------------------------------------------------------
    def fit(self, docs: Sequence[bytes], seed: int = 0) -> dict[str, Any]:
        """Train M1 on random crops (one window long, starting anywhere) of the training documents."""
        o = self.options
        data = np.frombuffer(b"".join(docs), dtype=np.uint8)
        k = o.max_window_bytes
        if len(data) <= k:
            raise ValueError(f"arith compressor: training text ({len(data)} bytes) is shorter than one window")
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        model = ByteLM(self.model_cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=0.0)
        src = torch.from_numpy(data.astype(np.int64))
        t0, loss_bits = time.perf_counter(), float("nan")
        for step in range(o.train_steps):
            starts = torch.randint(0, len(data) - k, (o.batch_size,), generator=gen)
            crop = src[starts[:, None] + torch.arange(k)]
            inp = torch.cat([torch.full((o.batch_size, 1), BOS), crop[:, :-1]], dim=1)
            for g in opt.param_groups:
                g["lr"] = o.lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / o.train_steps))
            loss = F.cross_entropy(model(inp).logits[..., :N_BYTES].reshape(-1, N_BYTES), crop.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_bits = loss.item() / math.log(2)
        self.model = model.double().eval()
        tokens = o.train_steps * o.batch_size * k
        return {
            "m1_params": sum(p.numel() for p in model.parameters()),
            "m1_train_steps": o.train_steps,
            "m1_train_tokens": tokens,
            "m1_train_flops": tokens * train_flops_per_token(self.model_cfg, k),
            "m1_final_train_bits_per_byte": loss_bits,
            "m1_train_seconds": time.perf_counter() - t0,
        }

    def _m1(self) -> ByteLM:
        if self.model is None:
            raise RuntimeError("arith compressor used before fit(); train its byte model first")
        return self.model

    def _cum_tables(self, inputs: torch.Tensor) -> np.ndarray:
        """Cumulative frequency tables [B, T, 257] (int64) for each position of inputs [B, T]."""
        with torch.no_grad():
            logits = self._m1()(inputs).logits[..., :N_BYTES].numpy()
        q = np.rint(logits * self.options.logit_grid).astype(np.int64)
        w = self._table[np.minimum(q.max(axis=-1, keepdims=True) - q, len(self._table) - 1)]
        freq = 1 + (w * (MAX_TOTAL - N_BYTES)) // w.sum(axis=-1, keepdims=True)
        cum = np.zeros((*freq.shape[:-1], N_BYTES + 1), dtype=np.int64)
        np.cumsum(freq, axis=-1, out=cum[..., 1:])
        return cum

    # --- windows ------------------------------------------------------------------------------
    def _window_bytes(self, count: int, bits: list[int]) -> bytes:
        o = self.options
        header = [(count >> i) & 1 for i in reversed(range(o.header_bits))]
        full = header + bits
        return bits_to_bytes(full + [0] * (o.window_bits - len(full)))

    def _encode_group(self, docs: Sequence[bytes]) -> list[bytes]:
        """Encode documents together: one M1 forward per round, one window per active document."""
        o = self.options
        k, payload = o.max_window_bytes, o.window_bits - o.header_bits
        arrays = [np.frombuffer(d, dtype=np.uint8).astype(np.int64) for d in docs]
        pos = [0] * len(docs)
        out: list[list[bytes]] = [[] for _ in docs]
        while True:
            active = [i for i, a in enumerate(arrays) if pos[i] < len(a)]
            if not active:
                return [b"".join(w) for w in out]
            crops = np.zeros((len(active), k), dtype=np.int64)
            for r, i in enumerate(active):
                piece = arrays[i][pos[i] : pos[i] + k]
                crops[r, : len(piece)] = piece
            inp = torch.from_numpy(np.concatenate([np.full((len(active), 1), BOS), crops[:, :-1]], axis=1))
            cum = self._cum_tables(inp)
            lo = np.take_along_axis(cum, crops[..., None], axis=-1)[..., 0].tolist()
            hi = np.take_along_axis(cum, crops[..., None] + 1, axis=-1)[..., 0].tolist()
            total = cum[..., -1].tolist()
            for r, i in enumerate(active):
                enc, count = ArithmeticEncoder(), 0
                for j in range(min(k, len(arrays[i]) - pos[i])):
                    snap = enc.state()
                    enc.encode(lo[r][j], hi[r][j], total[r][j])
                    if enc.length_if_finished() > payload:
                        enc.restore(snap)
                        break
                    count += 1
                if count == 0:  # cannot happen with payload >= 24 bits; guard against a silent loop
                    raise RuntimeError("arith window could not hold a single byte")
                out[i].append(self._window_bytes(count, enc.finish()))
                pos[i] += count

    def symbols_many(
        self, docs: Sequence[bytes], on_progress: Callable[[int], None] | None = None
    ) -> list[np.ndarray]:
        order = sorted(range(len(docs)), key=lambda i: len(docs[i]))
        result: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(docs)
        step = self.options.encode_batch
        for start in range(0, len(order), step):
            idx = order[start : start + step]
            for i, blob in zip(idx, self._encode_group([docs[i] for i in idx]), strict=True):
                result[i] = np.frombuffer(blob, dtype=np.uint8).astype(np.int64)
            if on_progress is not None:
                on_progress(min(start + step, len(order)))
        return result

    def compress(self, data: bytes) -> bytes:
        return self._encode_group([data])[0]

    def decompress(self, blob: bytes) -> bytes:
        """Decode every window of `blob` in parallel (each from a fresh coder and M1 context)."""
        o = self.options
        size = o.window_bits // 8
        if len(blob) % size:
            raise ValueError(f"arith stream length {len(blob)} is not a multiple of the {size}-byte window")
        windows = [blob[i : i + size] for i in range(0, len(blob), size)]
        return b"".join(self.decode_windows(windows))

    def decode_windows(self, windows: Sequence[bytes]) -> list[bytes]:
        """Decode independent windows (each `window_bits // 8` bytes) to their raw bytes."""
        o = self.options
        counts, decoders = [], []
        for w in windows:
            bits = bytes_to_bits(w)
            count = sum(bit << i for i, bit in enumerate(reversed(bits[: o.header_bits])))
            if count > o.max_window_bytes:
                raise ValueError(f"corrupt arith window: header says {count} bytes > {o.max_window_bytes}")
            counts.append(count)
            decoders.append(ArithmeticDecoder(bits[o.header_bits :]))
        decoded: list[list[int]] = [[] for _ in windows]
        for j in range(max(counts, default=0)):
            live = [i for i, c in enumerate(counts) if c > j]
            inp = torch.tensor([[BOS, *decoded[i]] for i in live], dtype=torch.int64)
            cum = self._cum_tables(inp)[:, -1]
            for r, i in enumerate(live):
                decoded[i].append(decoders[i].decode(cum[r]))
        return [bytes(d) for d in decoded]


COMPRESSORS.register("arith", "arithmetic")(ArithCompressor)
