"""Supervised warm-up: SFT on (prompt, answer) pairs and rejection fine-tuning (RFT) on passing samples.

Loss: mean negative log-likelihood of the answer tokens (token-mean over the batch), AdamW.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from kernelrl.rl import aggregate_loss
from kernelrl.train.logprobs import response_logprobs


def sft_train(
    model: Any, pairs: Sequence[tuple[list[int], list[int]]], *, steps: int, batch_size: int, lr: float,
    seed: int, pad_id: int = 0, max_grad_norm: float = 1.0,
) -> list[float]:
    """Train `model` on token pairs (prompt ids, answer ids) for `steps` batches; returns the losses."""
    if steps <= 0 or not pairs:
        return []
    rng = random.Random(seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        batch = [pairs[rng.randrange(len(pairs))] for _ in range(batch_size)]
        logp, _, mask = response_logprobs(model, [b[0] for b in batch], [b[1] for b in batch], pad_id=pad_id)
        loss = aggregate_loss(-logp, mask, "token-mean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
