"""Direct-OPD: weak-to-strong direct on-policy distillation.

A weak teacher improved by RL (``pi_T``) and its pre-RL reference (``pi_Tref``) score the strong
student's own samples; the teacher's log-likelihood gain ``delta = log pi_T - log pi_Tref`` is a
dense token reward (the direction RL moved the teacher), used directly as the advantage.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from kernelrl.rl.advantages import grpo_sequence_advantages
from kernelrl.rl.aggregation import aggregate_loss
from kernelrl.rl.losses import MAX_LOG_RATIO, LossOutput, ppo_clip_token_loss
from kernelrl.rl.masked import as_bool_mask, masked_mean, zero_masked
from kernelrl.rl.registries import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

WEIGHTINGS = ("student", "teacher", "unweighted")


def opd_token_rewards(teacher_log_prob: Tensor, teacher_ref_log_prob: Tensor, response_mask: Tensor) -> Tensor:
    """Sampled-token reward ``r_t = log pi_T(a_t) - log pi_Tref(a_t)`` on the student's tokens.

    ``[B, T]`` log-probs of the sampled tokens -> ``[B, T]``, zero where masked.
    """
    return zero_masked(teacher_log_prob - teacher_ref_log_prob, response_mask)


def opd_regularized_token_rewards(
    teacher_log_prob: Tensor,
    teacher_ref_log_prob: Tensor,
    log_prob: Tensor,
    ref_log_prob: Tensor,
    response_mask: Tensor,
    *,
    reward_scale: float = 1.0,
    kl_coef: float = 1.0,
) -> Tensor:
    """KL-regularised Direct-OPD token reward (G-OPD, Yang et al. 2026, arXiv 2602.12125, Eq. 4-6):

    ``r_t = reward_scale * (log pi_T - log pi_Tref)(a_t) - kl_coef * (log pi - log pi_ref)(a_t)``

    on the student's sampled tokens; the KL term is the per-token k1 estimate of ``KL(pi || pi_ref)``
    inside the reward (constant w.r.t. the parameters), so its policy gradient is that of the reverse
    KL. The maximiser of ``E_pi[sum_t r_t]`` is ``pi ∝ pi_ref (pi_T / pi_Tref)^(reward_scale / kl_coef)``;
    with ``pi_ref = pi_Tref`` and equal coefficients it is the teacher and ``r_t = log pi_T - log pi``
    (standard on-policy distillation's negative reverse KL, Agarwal et al. 2024). A KL *loss* with the
    k3 estimator instead has the gradient of the forward ``KL(pi_ref || pi)``, whose optimum
    ``pi(a) = pi_ref(a) / (c - r(a))`` piles mass on the tokens of largest teacher log-ratio.

    All inputs ``[B, T]`` (log-probs of the sampled tokens) -> ``[B, T]``, detached, zero where masked.
    """
    r = reward_scale * (teacher_log_prob - teacher_ref_log_prob) - kl_coef * (log_prob - ref_log_prob)
    return zero_masked(r.detach(), response_mask)


def topk_candidates(student_log_probs: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The student's top-K tokens per position: ``[B, T, V] -> (ids [B, T, K], log_probs [B, T, K])``."""
    values, ids = torch.topk(student_log_probs, k, dim=-1)
    return ids, values


def topk_candidate_weights(
    student_topk_log_probs: Tensor, teacher_topk_log_probs: Tensor | None = None, *, weighting: str = "student"
) -> Tensor:
    """Candidate weights ``w_v`` over the K candidates of each position, detached: ``[B, T, K]``.

    ``student``: softmax of the student's log-probs restricted to the K candidates
    (``pi_S(v) / sum_{u in K} pi_S(u)``); ``teacher``: the same with the teacher's log-probs;
    ``unweighted``: ``1/K``. Each position's weights sum to 1.
    """
    if weighting == "student":
        w = torch.softmax(student_topk_log_probs.detach(), dim=-1)
    elif weighting == "teacher":
        if teacher_topk_log_probs is None:
            raise ValueError("teacher weighting needs teacher_topk_log_probs")
        w = torch.softmax(teacher_topk_log_probs.detach(), dim=-1)
    elif weighting == "unweighted":
        w = torch.full_like(student_topk_log_probs, 1.0 / student_topk_log_probs.shape[-1])
    else:
        raise ValueError(f"unknown weighting {weighting!r}; known: {', '.join(WEIGHTINGS)}")
    return w.detach()


class TopKRewards(NamedTuple):
    """Top-K Direct-OPD reward ``[B, T]``, per-candidate deltas ``[B, T, K]`` and weights ``[B, T, K]``."""

    rewards: Tensor
    deltas: Tensor
    weights: Tensor


def opd_topk_rewards(
    student_topk_log_probs: Tensor,
    teacher_topk_log_probs: Tensor,
    teacher_ref_topk_log_probs: Tensor,
    response_mask: Tensor,
    *,
    weighting: str = "student",
) -> TopKRewards:
    """Top-K Direct-OPD reward ``r_t = sum_{v in K_t} w_v delta_v``, ``delta_v = log pi_T(v) - log pi_Tref(v)``.

    ``K_t``: the student's top-K candidates at position t (`topk_candidates`); all three inputs
    are log-probs of those candidates, ``[B, T, K]``; response_mask ``[B, T]``. Masked positions
    give zero rewards, deltas and weights.
    """
    m = as_bool_mask(response_mask).unsqueeze(-1)
    deltas = zero_masked((teacher_topk_log_probs - teacher_ref_topk_log_probs).detach(), m)
    weights = zero_masked(topk_candidate_weights(zero_masked(student_topk_log_probs, m),
                                                 zero_masked(teacher_topk_log_probs, m), weighting=weighting), m)
    return TopKRewards((weights * deltas).sum(-1), deltas, weights)


@POLICY_LOSSES.register("opd_topk")
def opd_topk_clipped_loss(
    log_prob_topk: Tensor,
    old_log_prob_topk: Tensor,
    deltas: Tensor,
    weights: Tensor,
    response_mask: Tensor,
    *,
    coef: float = 1.0,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    agg: str = "token-mean",
    max_length: int | None = None,
) -> LossOutput:
    """Per-candidate clipped loss of top-K Direct-OPD.

    Each candidate v at each position is an action with advantage ``coef * delta_v`` and ratio
    ``rho_v = pi(v) / pi_old(v)``; the token loss is the weighted sum of the candidates' PPO clip
    losses, ``l_t = sum_v w_v max(-A_v rho_v, -A_v clip(rho_v, 1 - clip_low, 1 + clip_high))``,
    then aggregated over tokens by ``agg``.

    log_prob_topk, old_log_prob_topk, deltas, weights: ``[B, T, K]``; response_mask ``[B, T]``.
    """
    mask = as_bool_mask(response_mask)
    m3 = mask.unsqueeze(-1)
    lr = zero_masked((log_prob_topk - old_log_prob_topk).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO), m3)
    ratio = torch.exp(lr)
    adv = coef * zero_masked(deltas, m3).detach()
    w = zero_masked(weights, m3).detach()
    cand_loss, clipped, _ = ppo_clip_token_loss(ratio, adv, clip_low=clip_low, clip_high=clip_high)
    token_loss = (w * zero_masked(cand_loss, m3)).sum(-1)
    loss = aggregate_loss(token_loss, mask, agg, max_length=max_length)
    with torch.no_grad():
        f = ratio.dtype
        metrics = {
            "clip_frac": masked_mean((w * (clipped & m3).to(f)).sum(-1), mask),
            "reward_mean": masked_mean((w * adv).sum(-1), mask),
            "ratio_mean": masked_mean((w * ratio).sum(-1), mask),
        }
    return LossOutput(loss, metrics)


@ADVANTAGE_ESTIMATORS.register("opd", "token_reward_direct")
def token_reward_direct_advantages(
    rewards: Tensor | None,
    group_ids: Tensor | None,
    response_mask: Tensor,
    *,
    token_rewards: Tensor,
    token_coef: float = 1.0,
    outcome_coef: float = 0.0,
    eps: float = 1e-6,
) -> Tensor:
    """Direct-OPD advantage ``token_reward_direct``: the token reward itself, no return, no baseline.

    ``A_{i,t} = token_coef * r_{i,t} [+ outcome_coef * GRPO(o)_i]`` where the optional outcome
    term is the GRPO group-normalised outcome advantage (`grpo_sequence_advantages`).

    rewards (outcome) ``[B]`` or None, group_ids ``[B]`` or None, response_mask ``[B, T]``,
    token_rewards ``[B, T]`` (from `opd_token_rewards` or `opd_topk_rewards`) -> ``[B, T]``.
    """
    mask = as_bool_mask(response_mask)
    dtype = token_rewards.dtype if rewards is None else torch.promote_types(token_rewards.dtype, rewards.dtype)
    adv = zero_masked(token_rewards.to(dtype), mask)
    if token_coef != 1.0:
        adv.mul_(token_coef)
    if outcome_coef != 0.0:
        if rewards is None or group_ids is None:
            raise ValueError("an outcome term needs rewards and group_ids")
        outcome = grpo_sequence_advantages(rewards, group_ids, eps=eps)
        adv.add_((outcome_coef * outcome).to(adv.dtype).unsqueeze(-1)).masked_fill_(~mask, 0)
    return adv


def adaptive_kl_coef(
    coef: float, mean_reward: float | Tensor, *, rate: float = 0.1, min_coef: float = 1e-4, max_coef: float = 1.0
) -> float:
    """Adaptive coefficient controller of Direct-OPD.

    ``coef * (1 + rate)`` when the batch's mean OPD reward is positive (the student already moves
    the way the teacher's RL moved), ``coef * (1 - rate)`` when negative, unchanged at zero;
    the result is clamped to ``[min_coef, max_coef]``.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError("rate must be in [0, 1)")
    value = float(mean_reward.item()) if isinstance(mean_reward, Tensor) else float(mean_reward)
    if value > 0:
        coef = coef * (1.0 + rate)
    elif value < 0:
        coef = coef * (1.0 - rate)
    return min(max(coef, min_coef), max_coef)
