"""Bits per byte on raw bytes, checked by hand."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from kernelrl.proxy.evaluate import bits_per_byte, evaluate_bpb
from kernelrl.proxy.mixing import pack_eval
from kernelrl.proxy.model import LMOutput


class Uniform(nn.Module):
    """Equal logits for every id of a 1284-id vocabulary."""

    def forward(self, ids: torch.Tensor) -> LMOutput:
        return LMOutput(torch.zeros(*ids.shape, 1284), None)


class HalfRight(nn.Module):
    """Knows the text: puts probability 1/2 on the true next id, spreads the rest over 255 bytes."""

    def __init__(self, stream: torch.Tensor, raw_head: bool) -> None:
        super().__init__()
        self.stream, self.raw_head = stream, raw_head

    def forward(self, ids: torch.Tensor) -> LMOutput:
        b, t = ids.shape
        logits = torch.full((b, t, 300), -1e9)
        logits[..., :256] = math.log(0.5 / 255)
        nxt = self.stream.roll(-1, dims=-1)[:, :t]
        logits.scatter_(-1, nxt[..., None], math.log(0.5))
        if self.raw_head:  # the main head is useless; only the raw head is right
            return LMOutput(torch.zeros(b, t, 300), logits[..., :256].clone())
        return LMOutput(logits, None)


def test_uniform_model_scores_eight_bits_per_byte() -> None:
    ids, is_raw = pack_eval([b"import os\n" * 20, b"print(1)\n"], seq_len=16)
    assert evaluate_bpb(Uniform(), ids, is_raw, batch_size=3) == pytest.approx(8.0, abs=1e-9)


@pytest.mark.parametrize("raw_head", [False, True])
def test_half_right_model_scores_one_bit_per_byte(raw_head: bool) -> None:
    ids, is_raw = pack_eval([b"abc\n" * 30], seq_len=12)
    rows = []
    for start in range(0, ids.shape[0], 4):
        model = HalfRight(ids[start : start + 4], raw_head)
        rows.append(evaluate_bpb(model, ids[start : start + 4], is_raw[start : start + 4], batch_size=4))
    assert rows and all(r == pytest.approx(1.0, abs=1e-6) for r in rows)


def test_bits_per_byte_by_hand() -> None:
    logprobs = torch.log(torch.full((2, 256), 1 / 512))
    logprobs[0, 7] = math.log(0.25)
    logprobs[1, 9] = math.log(0.125)
    assert bits_per_byte(logprobs, torch.tensor([7, 9])) == pytest.approx((2 + 3) / 2)
    with pytest.raises(ValueError, match="zero bytes"):
        bits_per_byte(logprobs[:0], torch.tensor([], dtype=torch.long))
