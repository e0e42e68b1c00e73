"""Log-prob fidelity: engine log-probs vs a teacher-forced forward pass of the same model.

RL corrections (importance ratios, CoPRIS stitching) assume the log-prob recorded at sampling
time is the log-prob the trainer would compute for the same weights; `logprob_gap` measures how
far apart they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelrl.generation.engine import eval_mode
from kernelrl.generation.records import GenerationRequest, GenerationResult, SamplingParams
from kernelrl.generation.sampling import params_tensors, process_logits


def teacher_forced_logprobs(
    model: Any, prompt_token_ids: Sequence[int], token_ids: Sequence[int], params: SamplingParams
) -> torch.Tensor:
    """Log-probs [T] of `token_ids` given the prompt, from one full forward pass of prompt + response.

    Each position's logits go through the same temperature/top-k/top-p processing as sampling
    (`process_logits`), so the numbers are comparable with `GenerationResult.logprobs`.
    """
    if not token_ids:
        return torch.zeros(0)
    device = next(model.parameters()).device
    ids = torch.tensor([[*prompt_token_ids, *token_ids]], device=device)
    with eval_mode(model), torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_token_ids) - 1 : -1]  # [T, V]
        n = logits.shape[0]
        temperature, top_k, top_p = params_tensors([params] * n, device)
        lp = process_logits(logits, temperature, top_k, top_p)
        target = torch.tensor(list(token_ids), device=device).unsqueeze(-1)
        return lp.gather(-1, target).squeeze(-1).cpu()


@dataclass(frozen=True)
class LogprobGap:
    """|engine log-prob - teacher-forced log-prob| over all generated tokens."""

    max: float
    mean: float
    num_tokens: int


def logprob_gap(
    model: Any, requests: Sequence[GenerationRequest], results: Sequence[GenerationResult]
) -> LogprobGap:
    """The fidelity metric for `results` (matched to `requests` by request id).

    A token the teacher-forced pass gives probability 0 (e.g. it fell just outside top-p) makes
    the gap infinite, which is what it is.
    """
    by_id = {r.request_id: r for r in requests}
    gaps: list[torch.Tensor] = []
    for res in results:
        if res.request_id not in by_id:
            raise KeyError(f"no request for result {res.request_id!r}")
        if not res.token_ids:
            continue
        tf = teacher_forced_logprobs(model, res.prompt_token_ids, res.token_ids, by_id[res.request_id].params)
        gaps.append((torch.tensor(res.logprobs) - tf).abs())
    if not gaps:
        return LogprobGap(0.0, 0.0, 0)
    allg = torch.cat(gaps).double()
    allg = torch.where(torch.isnan(allg), math.inf, allg)
    return LogprobGap(float(allg.max()), float(allg.mean()), int(allg.numel()))
