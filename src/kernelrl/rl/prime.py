"""PRIME: process reinforcement through implicit rewards (Cui et al. 2025).

The implicit PRM is a language model ``pi_phi`` trained only on outcome labels; its per-token
log-likelihood ratio against a frozen reference is a dense process reward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernelrl.rl.groups import group_index, leave_one_out_mean
from kernelrl.rl.masked import (
    as_bool_mask,
    mask_count,
    masked_sum,
    reverse_cumsum,
    reverse_cumsum_,
    whiten_,
    zero_masked,
)
from kernelrl.rl.registries import ADVANTAGE_ESTIMATORS, declare_inputs


def implicit_process_rewards(
    log_prob_prm: Tensor, log_prob_ref: Tensor, response_mask: Tensor, *, beta: float = 0.05
) -> Tensor:
    """Implicit process reward per token (PRIME, Cui et al. 2025, from the implicit PRM):
    ``r_t = beta * (log pi_phi(y_t | y_<t) - log pi_ref(y_t | y_<t))``.

    ``[B, T]`` log-probs of the sampled tokens -> ``[B, T]`` rewards, zero where masked.
    """
    return zero_masked(beta * (log_prob_prm - log_prob_ref), response_mask)


def prm_cross_entropy_loss(process_rewards: Tensor, response_mask: Tensor, labels: Tensor) -> Tensor:
    """Online PRM update loss (PRIME, cross-entropy on outcome labels).

    ``r_phi(y) = sum_t r_t`` (``= beta log pi_phi(y)/pi_ref(y)``) is a logit for "correct":
    ``L = -mean_i [ y_i log sigma(r_phi(y_i)) + (1 - y_i) log(1 - sigma(r_phi(y_i))) ]``.
    Gradients flow through ``process_rewards`` into the PRM.

    process_rewards ``[B, T]``, response_mask ``[B, T]``, labels ``[B]`` in [0, 1] -> scalar.
    """
    seq = masked_sum(process_rewards, response_mask, -1)
    y = labels.to(seq.dtype)
    # -[y log s(x) + (1 - y) log(1 - s(x))] = log(1 + e^x) - y x, written stably
    return (torch.logaddexp(seq, torch.zeros_like(seq)) - y * seq).mean()


def normalize_process_rewards(process_rewards: Tensor, response_mask: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Batch normalisation of process rewards (PRIME reference setting ``batch_norm``).

    Scales every token reward by one batch constant so the largest return-to-go magnitude is 1:
    ``r_t / (max_{i,t} |sum_{s >= t} r_{i,s}| + eps)``; relative values are preserved.
    ``[B, T] -> [B, T]``, zero where masked.
    """
    mask = as_bool_mask(response_mask)
    returns = reverse_cumsum(process_rewards, mask)
    scale = zero_masked(returns.abs(), mask).amax() if returns.numel() else returns.new_zeros(())
    return zero_masked(process_rewards, mask) / (scale + eps)


@ADVANTAGE_ESTIMATORS.register("prime")
@declare_inputs(process_rewards=True)
def prime_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    response_mask: Tensor,
    *,
    process_rewards: Tensor,
    process_coef: float = 1.0,
    outcome_coef: float = 1.0,
    gamma: float = 1.0,
    whiten: bool = True,
    eps: float = 1e-8,
) -> Tensor:
    """PRIME advantage: RLOO per reward source, weighted sum, returns, whitening (Cui et al. 2025).

    Each sample's process score is the mean of its token rewards, ``p_i = mean_t r_{i,t}``; the
    process baseline is the leave-one-out mean of the group's other scores, ``b_i``. Then

    ``A_{i,t} = process_coef * sum_{s >= t} gamma^(s-t) (r_{i,s} - b_i)
              + outcome_coef * (o_i - 1/(k-1) sum_{j != i} o_j)``

    (the sum runs over valid tokens; the outcome term sits at the last token and, undiscounted,
    reaches every token), finally whitened over the batch's valid tokens when ``whiten``.
    A group of one keeps its raw values (baseline 0).

    rewards (outcome) ``[B]``, group_ids ``[B]``, response_mask ``[B, T]``, process_rewards
    ``[B, T]`` -> ``[B, T]``.
    """
    mask = as_bool_mask(response_mask)
    index = group_index(group_ids)
    proc = zero_masked(process_rewards.to(torch.promote_types(process_rewards.dtype, rewards.dtype)), mask)
    score = proc.sum(-1) / mask_count(mask, -1, proc.dtype).clamp_min(1)
    proc.sub_(leave_one_out_mean(score, index).unsqueeze(-1)).masked_fill_(~mask, 0)
    adv = reverse_cumsum_(proc, mask, gamma, fill=False)
    outcome = (outcome_coef * (rewards - leave_one_out_mean(rewards, index))).to(adv.dtype).unsqueeze(-1)
    adv = torch.add(outcome, adv, alpha=process_coef, out=adv).masked_fill_(~mask, 0)
    return whiten_(adv, mask, eps=eps) if whiten else adv

