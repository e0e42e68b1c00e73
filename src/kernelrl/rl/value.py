"""Critic-based PPO pieces: GAE advantages and the clipped value loss.

- `gae_advantages`: Generalized Advantage Estimation (Schulman et al. 2016, "High-Dimensional
  Continuous Control Using Generalized Advantage Estimation", Eq. 16) over response tokens;
- `gae_estimator`: the same under the ``ADVANTAGE_ESTIMATORS`` calling convention, registered as "gae";
- `clipped_value_loss`: PPO's clipped value objective (as in OpenAI baselines' ppo2 and the
  RLHF PPO implementations).

Token tensors are ``[B, T]`` with a response mask ``[B, T]``; masked positions are skipped (neither a
reward, a value nor a discount step) and come back as zero.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernelrl.rl.aggregation import aggregate_loss
from kernelrl.rl.masked import as_bool_mask, place_at_last_token, whiten_, zero_masked
from kernelrl.rl.registries import ADVANTAGE_ESTIMATORS, declare_inputs


def _check_tokens(mask: Tensor, **tensors: Tensor) -> None:
    if mask.dim() != 2:
        raise ValueError(f"want response_mask [B, T]; got {tuple(mask.shape)}")
    for name, x in tensors.items():
        if x.shape != mask.shape:
            raise ValueError(f"{name} must match response_mask {tuple(mask.shape)}; got {tuple(x.shape)}")


def gae_advantages(
    token_rewards: Tensor, values: Tensor, response_mask: Tensor, gamma: float = 1.0, lam: float = 1.0, *,
    whiten: bool = False, eps: float = 1e-8,
) -> tuple[Tensor, Tensor]:
    """GAE(gamma, lambda) advantages and value targets (Schulman et al. 2016, Eq. 16).

    Over the valid tokens t of a row, with t' the next valid token (``V_{t'} = 0`` after the last one,
    the end of the episode): ``delta_t = r_t + gamma V_{t'} - V_t`` and
    ``A_t = delta_t + gamma lam A_{t'}`` (= ``sum_l (gamma lam)^l delta_{t+l}``, Eq. 16), computed
    backwards. Masked positions (left or right padding, tool tokens between turns) are skipped.
    ``returns = A + V`` (the critic's targets, from the unwhitened advantages). ``whiten=True``
    then whitens the advantages over every valid token of the batch, as PPO implementations do, with
    the population variance (OpenAI Baselines' ppo2: numpy's ``std``, ddof 0; verl's ``masked_whiten``
    uses Bessel's correction, a factor sqrt(n / (n - 1)) apart). Pass the action mask: tokens the
    environment wrote (tool outputs) are then skipped by the recursion and the whitening alike.
    ``gamma = lam = 1`` gives returns-to-go minus values; ``lam = 0`` the one-step TD errors.
    Gradients flow through ``values``; pass detached values for PPO.

    token_rewards, values, response_mask ``[B, T]`` -> (advantages, returns) ``[B, T]``, zero where masked.
    """
    _check_tokens(response_mask, token_rewards=token_rewards, values=values)
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1]; got gamma={gamma}, lam={lam}")
    m = as_bool_mask(response_mask)
    dtype = torch.promote_types(token_rewards.dtype, values.dtype)
    # positions first, so each backward step reads one contiguous [B] slice
    r = zero_masked(token_rewards.to(dtype), m).transpose(0, 1)
    v = zero_masked(values.to(dtype), m).transpose(0, 1)
    mt = m.transpose(0, 1)
    next_value = torch.zeros_like(v[0]) if v.shape[0] else v.new_zeros(v.shape[1])
    next_adv = torch.zeros_like(next_value)
    steps: list[Tensor] = []
    for t in range(v.shape[0] - 1, -1, -1):
        adv_t = r[t] + gamma * next_value - v[t] + (gamma * lam) * next_adv
        next_adv = torch.where(mt[t], adv_t, next_adv)
        next_value = torch.where(mt[t], v[t], next_value)
        steps.append(adv_t)
    adv = torch.stack(steps[::-1], dim=1) if steps else values.new_zeros(m.shape, dtype=dtype)
    adv = zero_masked(adv, m)
    returns = zero_masked(adv + v.transpose(0, 1), m)
    if whiten:
        adv = whiten_(adv.clone(), m, eps=eps)
    return adv, returns


@ADVANTAGE_ESTIMATORS.register("gae")
@declare_inputs(values=True)
def gae_estimator(
    rewards: Tensor, group_ids: Tensor | None, response_mask: Tensor, *, values: Tensor,
    token_rewards: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0, whiten: bool = True, eps: float = 1e-8,
) -> Tensor:
    """`gae_advantages` in the estimator convention ``(rewards, group_ids, response_mask, **extras)``.

    The token rewards are the outcome ``rewards [B]`` on each row's last valid token plus
    ``token_rewards [B, T]`` when given (e.g. a per-token KL penalty; pass zero ``rewards`` when
    ``token_rewards`` already holds the outcome). ``group_ids`` is unused: the critic is the baseline.
    A trainer must pass the critic's (detached) ``values [B, T]`` as an extra, and computes its value
    targets with `gae_advantages` (``returns``) since an estimator returns advantages only.
    Whitened over valid tokens by default (PPO practice). -> advantages ``[B, T]``.
    """
    if rewards.dim() != 1 or rewards.shape[0] != response_mask.shape[0]:
        raise ValueError(f"want rewards [B] for response_mask [B, T]; got {tuple(rewards.shape)}")
    r = place_at_last_token(rewards.to(values.dtype), response_mask)
    if token_rewards is not None:
        r = r + zero_masked(token_rewards.to(r.dtype), response_mask)
    return gae_advantages(r, values, response_mask, gamma, lam, whiten=whiten, eps=eps)[0]


def clipped_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, response_mask: Tensor, clip_range: float = 0.2, *,
    agg: str = "token-mean", max_length: int | None = None,
) -> Tensor:
    """PPO's clipped value loss: ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)``.

    The value may move at most ``clip_range`` from the rollout's ``old_values`` before the clipped
    branch takes over; when that branch is the larger and the clip binds it carries no gradient.
    Aggregated over valid tokens with `aggregate_loss` mode ``agg`` (token-mean by default).

    values (with grad), old_values, returns, response_mask ``[B, T]`` -> scalar.
    """
    _check_tokens(response_mask, values=values, old_values=old_values, returns=returns)
    if clip_range <= 0:
        raise ValueError(f"clip_range must be positive; got {clip_range}")
    m = as_bool_mask(response_mask)
    v = zero_masked(values, m)
    old = zero_masked(old_values.to(v.dtype), m)
    target = zero_masked(returns.to(v.dtype), m)
    clipped = old + (v - old).clamp(-clip_range, clip_range)
    loss = 0.5 * torch.maximum((v - target).square(), (clipped - target).square())
    return aggregate_loss(loss, m, agg, max_length=max_length)
