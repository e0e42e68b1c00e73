"""Bits per byte on raw bytes only: the metric every arm is judged by."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kernelrl.proxy.model import N_BYTES, LMOutput, raw_byte_logprobs


def bits_per_byte(logprobs: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean -log2 p(target). logprobs: [N, 256] natural-log probabilities; targets: [N] in 0..255."""
    if targets.numel() == 0:
        raise ValueError("bits per byte of zero bytes is undefined")
    nll = -logprobs.gather(-1, targets[:, None].long())[:, 0]
    return float(nll.double().sum() / targets.numel() / math.log(2))


@torch.no_grad()
def evaluate_bpb(
    model: Callable[[torch.Tensor], LMOutput],
    ids: torch.Tensor,
    is_raw: torch.Tensor,
    batch_size: int = 16,
) -> float:
    """Bits per raw byte over rows ids [R, T + 1]; only targets inside `<raw>` segments count.

    The prediction for each byte is the model's raw-byte distribution (`raw_byte_logprobs`).
    """
    total_bits, count = 0.0, 0
    for start in range(0, ids.shape[0], batch_size):
        x, mask = ids[start : start + batch_size], is_raw[start : start + batch_size, 1:]
        targets = x[:, 1:][mask]
        if targets.numel() == 0:
            continue
        if targets.max() >= N_BYTES:
            raise ValueError("a raw-byte target is not a byte id; the raw mask is wrong")
        logprobs = raw_byte_logprobs(model(x[:, :-1]))[mask]
        total_bits += bits_per_byte(logprobs, targets) * targets.numel()
        count += targets.numel()
    if count == 0:
        raise ValueError("no raw bytes to evaluate")
    return total_bits / count


@torch.no_grad()
def evaluate_symbol_bpb(
    model: Callable[[torch.Tensor], LMOutput],
    ids: torch.Tensor,
    counted: torch.Tensor,
    raw_bytes: int,
    batch_size: int = 16,
) -> float:
    """Bits per raw byte of a model that reads compressed symbols only (the tokenizer-only baseline).

    ids, counted: [R, T + 1] (`pack_eval_symbols`); the total NLL of the counted targets under the
    main head's full softmax, in bits, divided by `raw_bytes`, the raw length of the text they encode.
    """
    if raw_bytes <= 0:
        raise ValueError(f"raw_bytes must be positive, got {raw_bytes}")
    total_bits, count = 0.0, 0
    for start in range(0, ids.shape[0], batch_size):
        x, mask = ids[start : start + batch_size], counted[start : start + batch_size, 1:]
        if not mask.any():
            continue
        logprobs = torch.log_softmax(model(x[:, :-1]).logits.double(), dim=-1)[mask]
        targets = x[:, 1:][mask]
        total_bits += float(-logprobs.gather(-1, targets[:, None])[:, 0].sum()) / math.log(2)
        count += int(targets.numel())
    if count == 0:
        raise ValueError("no symbols to evaluate")
    return total_bits / raw_bytes
