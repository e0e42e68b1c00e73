"""Per-token log-probs and entropies of responses under a causal LM (teacher forcing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from kernelrl.rl import entropy_from_logits


def pad_responses(responses: Sequence[Sequence[int]], pad: int = 0) -> tuple[Tensor, Tensor]:
    """Right-padded ``[B, T]`` token ids and their bool mask."""
    width = max(1, max((len(r) for r in responses), default=1))
    ids = torch.full((len(responses), width), pad, dtype=torch.long)
    mask = torch.zeros((len(responses), width), dtype=torch.bool)
    for i, r in enumerate(responses):
        ids[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = True
    return ids, mask


def _response_logits(model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                     pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """Next-token logits at each response position ``[B, T, V]``, response ids ``[B, T]`` and mask ``[B, T]``.

    Prompt + response are right-padded into one batch; the logits at position ``P + t - 1`` score
    response token t (so position t never sees token t itself).
    """
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
    ids, attn = pad_responses(seqs, pad_id)
    device = next(model.parameters()).device
    logits = model(input_ids=ids.to(device), attention_mask=attn.to(device).long()).logits.float()
    targets, resp_mask = pad_responses(responses, pad_id)
    width = resp_mask.shape[1]
    starts = torch.tensor([len(p) - 1 for p in prompts])
    index = (starts.unsqueeze(1) + torch.arange(width).unsqueeze(0)).clamp(max=ids.shape[1] - 1).to(device)
    pos_logits = logits.gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    return pos_logits, targets.to(device), resp_mask.to(device)


def response_logprobs(
    model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *,
    pad_id: int = 0, with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Log-probs ``[B, T]`` of each response token given its prompt (and entropies ``[B, T]``).

    Returns (log_probs, entropy or None, response mask), zero where masked.
    """
    pos_logits, targets, mask = _response_logits(model, prompts, responses, pad_id)
    logp = torch.log_softmax(pos_logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logp = torch.where(mask, logp, torch.zeros_like(logp))
    ent = None
    if with_entropy:
        ent = torch.where(mask, entropy_from_logits(pos_logits), torch.zeros_like(logp))
    return logp, ent, mask


def response_distributions(
    model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *, pad_id: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Full next-token log-probs ``[B, T, V]`` at each response position, the sampled tokens'
    log-probs ``[B, T]`` (zero where masked) and the response mask ``[B, T]``."""
    pos_logits, targets, mask = _response_logits(model, prompts, responses, pad_id)
    logp_all = torch.log_softmax(pos_logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logp_all, torch.where(mask, logp, torch.zeros_like(logp)), mask
