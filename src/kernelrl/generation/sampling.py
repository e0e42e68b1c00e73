"""Logit processing (temperature, top-k, top-p) and per-row seeded sampling.

`process_logits` is the single definition of "the sampling distribution actually used": the
engine samples from it and the teacher-forced fidelity check re-applies it, so the two log-probs
agree up to float error in the logits.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import torch

from kernelrl.generation.records import SamplingParams


def process_logits(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Log-probs of the processed next-token distribution, one row per sequence.

    logits: [B, V] raw model logits; temperature: [B] (0 = greedy), top_k: [B] long (0 = off),
    top_p: [B] in (0, 1] (1 = off). Returns float32 [B, V] log-probs; filtered tokens are -inf.
    Order: divide by temperature, keep the top_k most likely, then keep the smallest set of most
    likely tokens whose renormalised mass reaches top_p (the most likely token is always kept).
    Greedy rows are a point mass on the argmax (log-prob 0 there, -inf elsewhere).
    """
    logits = logits.float()
    v = logits.shape[-1]
    greedy = temperature <= 0
    scaled = logits / torch.where(greedy, 1.0, temperature.float()).unsqueeze(-1)
    k_on = (top_k > 0) & (top_k < v) & ~greedy
    p_on = (top_p < 1) & ~greedy
    if bool(k_on.any() or p_on.any()):
        sorted_vals, sorted_idx = scaled.sort(dim=-1, descending=True)
        rank = torch.arange(v, device=logits.device).unsqueeze(0)
        kth = torch.where(k_on, top_k, v).unsqueeze(-1)
        remove = rank >= kth
        probs = sorted_vals.masked_fill(remove, float("-inf")).softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        remove |= (mass_before >= top_p.float().unsqueeze(-1)) & p_on.unsqueeze(-1)
        remove[:, 0] = False
        mask = torch.zeros_like(remove).scatter_(-1, sorted_idx, remove)
        scaled = scaled.masked_fill(mask, float("-inf"))
    logprobs = scaled.log_softmax(dim=-1)
    if bool(greedy.any()):
        point = torch.full_like(logprobs, float("-inf"))
        point.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 0.0)
        logprobs = torch.where(greedy.unsqueeze(-1), point, logprobs)
    return logprobs


def params_tensors(
    params: Sequence[SamplingParams], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(temperature [B], top_k [B], top_p [B]) tensors for `process_logits`."""
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
    top_k = torch.tensor([p.top_k for p in params], dtype=torch.long, device=device)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
    return temperature, top_k, top_p


def sample_rows(logprobs: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """Draw one token per row by inverting the row's CDF with one uniform from its own generator.

    logprobs: [B, V] processed log-probs; generators: B generators on logprobs' device.
    Returns [B] long. Each row consumes exactly one uniform per token, so a request's samples
    depend only on its own seed and its own logits, whatever else is in the batch.
    """
    b = logprobs.shape[0]
    u = torch.cat([torch.rand(1, generator=g, device=logprobs.device) for g in generators]).view(b, 1)
    cdf = logprobs.exp().cumsum(dim=-1)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return idx.clamp_(max=logprobs.shape[-1] - 1).squeeze(-1)


def top_logprobs(logprobs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most likely (ids [B, k], log-probs [B, k]) per row, most likely first."""
    vals, ids = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1)
    return ids, vals


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch.Generator on `device` seeded with `seed`."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def generator_state(g: torch.Generator) -> str:
    """The generator's state as base64 text (JSON-friendly)."""
    return base64.b64encode(g.get_state().numpy().tobytes()).decode("ascii")


def restore_generator(state: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on `device` continuing from a `generator_state` string."""
    g = torch.Generator(device=device)
    raw = bytearray(base64.b64decode(state))
    g.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())
    return g
