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


def _response_logits(
    model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int, share_prompts: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Next-token logits at each response position ``[B, T, V]`` (position t never sees token t), the
    response ids ``[B, T]`` and mask ``[B, T]``.

    With ``share_prompts`` and a batch whose samples repeat prompts (the G samples of a GRPO group),
    each distinct prompt runs through the model once and its KV cache is gathered for every sample,
    gradients included; only the responses run per sample. Otherwise prompt + response are
    right-padded into one batch and the logits at position ``P + t - 1`` score response token t.
    """
    keys = [tuple(p) for p in prompts]
    if share_prompts and len(set(keys)) < len(keys) and all(keys) and _supports_cache(model):
        pos_logits = _shared_prompt_logits(model, keys, responses, pad_id)
    else:
        pos_logits = _joint_logits(model, prompts, responses, pad_id)
    targets, resp_mask = pad_responses(responses, pad_id)
    return pos_logits, targets.to(pos_logits.device), resp_mask.to(pos_logits.device)


def response_logprobs(
    model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *,
    pad_id: int = 0, with_entropy: bool = False, share_prompts: bool = True,
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Log-probs ``[B, T]`` of each response token given its prompt (and entropies ``[B, T]``).

    Returns (log_probs, entropy or None, response mask), zero where masked; see `_response_logits`.
    """
    pos_logits, targets, mask = _response_logits(model, prompts, responses, pad_id, share_prompts)
    logp = torch.log_softmax(pos_logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logp = torch.where(mask, logp, torch.zeros_like(logp))
    ent = None
    if with_entropy:
        ent = torch.where(mask, entropy_from_logits(pos_logits), torch.zeros_like(logp))
    return logp, ent, mask


def response_distributions(
    model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *, pad_id: int = 0,
    share_prompts: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Full next-token log-probs ``[B, T, V]`` at each response position, the sampled tokens'
    log-probs ``[B, T]`` (zero where masked) and the response mask ``[B, T]``."""
    pos_logits, targets, mask = _response_logits(model, prompts, responses, pad_id, share_prompts)
    logp_all = torch.log_softmax(pos_logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logp_all, torch.where(mask, logp, torch.zeros_like(logp)), mask


def _supports_cache(model: Any) -> bool:
    return bool(getattr(getattr(model, "config", None), "use_cache", False)) or hasattr(model, "generate")


def joint_batch(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """One right-padded batch of prompt + response: ids ``[B, L]``, attention mask ``[B, L]`` and, for
    each response token t, the position ``P + t - 1`` whose output reads the state before token t
    ``[B, T]`` (clamped into the row; response positions past a row's end are masked by the caller)."""
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
    ids, attn = pad_responses(seqs, pad_id)
    width = max(1, max((len(r) for r in responses), default=1))
    starts = torch.tensor([len(p) - 1 for p in prompts])
    index = (starts.unsqueeze(1) + torch.arange(width).unsqueeze(0)).clamp(max=ids.shape[1] - 1)
    return ids, attn, index


def _joint_logits(model: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> Tensor:
    """Logits ``[B, T, V]`` scoring each response token, from one forward over prompt + response."""
    ids, attn, index = joint_batch(prompts, responses, pad_id)
    device = next(model.parameters()).device
    logits = model(input_ids=ids.to(device), attention_mask=attn.to(device).long()).logits.float()
    index = index.to(device)
    return logits.gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))


def _shared_prompt_logits(model: Any, keys: list[tuple[int, ...]], responses: Sequence[Sequence[int]], pad_id: int) -> Tensor:
    """Logits ``[B, T, V]`` scoring each response token, each distinct prompt computed once.

    Prompts are right-padded (no query row is fully masked, so no NaN reaches a gradient); their
    cache is gathered to the samples' rows; responses follow at positions ``len(prompt) + t`` with the
    padded prompt columns masked out. Response token 0 is scored by the prompt's last logits.
    """
    from transformers import DynamicCache

    from kernelrl.generation.kv_cache import cache_kwarg

    cache_key = cache_kwarg(model)
    device = next(model.parameters()).device
    unique: dict[tuple[int, ...], int] = {}
    owner = torch.tensor([unique.setdefault(k, len(unique)) for k in keys], device=device)
    p_ids, p_mask = pad_responses(list(unique), pad_id)
    p_ids, p_mask = p_ids.to(device), p_mask.to(device)
    p_len = p_mask.sum(1)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=p_ids, attention_mask=p_mask.long(), position_ids=torch.arange(p_ids.shape[1], device=device)
                .unsqueeze(0).expand_as(p_ids), use_cache=True, **{cache_key: cache})
    first = out.logits.float()[torch.arange(len(unique), device=device), p_len - 1][owner].unsqueeze(1)  # [B, 1, V]
    width = max(1, max((len(r) for r in responses), default=1))
    if width == 1:
        return first
    cache.batch_select_indices(owner)  # the cache the prompt pass filled in place
    r_ids, r_mask = pad_responses([list(r)[: width - 1] for r in responses], pad_id)
    r_ids, r_mask = r_ids[:, : width - 1].to(device), r_mask[:, : width - 1].to(device)
    positions = p_len[owner].unsqueeze(1) + torch.arange(width - 1, device=device).unsqueeze(0)
    attn = torch.cat([p_mask[owner], r_mask], dim=1).long()
    rest = model(input_ids=r_ids, attention_mask=attn, position_ids=positions, use_cache=True,
                 **{cache_key: cache}).logits.float()
    return torch.cat([first, rest], dim=1)
