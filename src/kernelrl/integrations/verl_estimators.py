"""kernelrl advantage estimators in verl's calling convention: the generic adapter and the dedicated ones.

`adapt_estimator` wraps any estimator whose inputs verl provides; TRLOO and PRIME get dedicated
adapters (`trloo_for_verl`, `prime_for_verl`), Direct-OPD its own in `verl_opd`.
`compute_advantage_from_batch` forwards batch entries verl's own `compute_advantage` does not.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kernelrl.integrations.verl_inputs import (
    algorithm_gamma,
    kernelrl_option,
    outcome_coef_for,
    per_sample_tensor,
    uid_group_ids,
)
from kernelrl.integrations.verl_opd import direct_opd_for_verl

_ESTIMATOR_INPUTS = ("token_level_rewards", "response_mask", "mask", "rewards", "scores", "group_ids", "groups", "index",
                     "group_index", "config")


def adapt_estimator(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a kernelrl estimator for verl's calling convention
    `(token_level_rewards (B, T), response_mask (B, T), index=uids, config=...) -> (advantages, returns)`.

    The estimator receives whichever of these it names: `token_level_rewards`, `response_mask`/`mask`,
    `rewards`/`scores` (B,) = summed token rewards, `group_ids`/`groups`/`index`/`group_index` (B,)
    long, `config`, `gamma` (``algorithm.gamma``). A (B,) result is broadcast over the response tokens;
    returns = advantages.
    """
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in _ESTIMATOR_INPUTS]
    if missing:
        raise TypeError(f"{getattr(fn, '__name__', fn)} needs inputs verl does not provide: {', '.join(missing)}")

    def estimator(token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None, **extra: Any) -> Any:
        scores = token_level_rewards.sum(dim=-1)
        groups = uid_group_ids(index, scores.shape[0], scores.device)
        offered = {"token_level_rewards": token_level_rewards, "response_mask": response_mask, "mask": response_mask,
                   "rewards": scores, "scores": scores, "group_ids": groups, "groups": groups, "index": groups,
                   "group_index": groups, "config": config}
        kwargs = {k: v for k, v in offered.items() if k in params}
        if "gamma" in params:
            kwargs["gamma"] = algorithm_gamma(config)
        if takes_any:
            kwargs.update({k: v for k, v in extra.items() if k not in kwargs})
        out = fn(**kwargs)
        advantages = out[0] if isinstance(out, tuple) else out
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(-1)
        advantages = advantages * response_mask
        return advantages, advantages

    estimator.__name__ = f"verl_{getattr(fn, '__name__', 'estimator')}"
    estimator.__doc__ = f"verl adapter of {getattr(fn, '__name__', fn)}"
    return estimator


# ---- dedicated adapters for the estimators whose inputs verl does not name


def response_turns(response_mask: Any) -> tuple[Any, Any, Any]:
    """Assistant turns of verl multi-turn responses: the contiguous runs of ``response_mask == 1``.

    verl's agent loop gives tool/user tokens mask 0, so each run of 1s is one model turn.
    response_mask ``[B, T]`` -> ``(row [N], turn [N], owner [B, T])``: turn n is turn number
    ``turn[n]`` (from 0) of response ``row[n]``; ``owner[b, t]`` is the turn a position's reward counts
    for: the turn it lies in, else the last turn before it (tool output and padding after a turn count
    for that turn), positions before the first turn count for turn 0.
    """
    import torch

    mask = response_mask.bool()
    previous = torch.zeros_like(mask)
    previous[:, 1:] = mask[:, :-1]
    starts = mask & ~previous
    owner = (starts.long().cumsum(-1) - 1).clamp_min(0)
    count = starts.sum(-1)
    width = max(1, int(count.max().item())) if count.numel() else 1
    row, turn = (torch.arange(width, device=mask.device) < count.unsqueeze(-1)).nonzero(as_tuple=True)
    return row, turn, owner


def trloo_for_verl(token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None,
                   **_: Any) -> tuple[Any, Any]:
    """`kernelrl_trloo`: TRLOO (`kernelrl.rl.trloo_advantages`) on verl's multi-turn responses.

    Turns are the runs of ``response_mask == 1`` (`response_turns`); turn k's reward ``r_k`` is the sum
    of ``token_level_rewards`` over the positions it owns (a reward manager puts each turn's reward on
    its last token; the agent loop's final reward, even on a trailing tool token, counts for the last
    turn). Returns ``G_k = r_k + gamma G_{k+1}`` with ``gamma = algorithm.gamma``; groups are
    (``index`` uid, k); ``A_k = G_k - mean of the group's other G_k`` on turn k's tokens, 0 elsewhere.

    token_level_rewards, response_mask ``[B, T]``, index ``[B]`` uids -> (advantages, returns ``G_k``) ``[B, T]``.
    """
    import torch

    from kernelrl.rl import episode_returns, trloo_advantages

    advantages = torch.zeros_like(token_level_rewards)
    returns = torch.zeros_like(token_level_rewards)
    row, turn, owner = response_turns(response_mask)
    if row.numel() == 0:
        return advantages, returns
    width = int(turn.max().item()) + 1
    per_turn = token_level_rewards.new_zeros(owner.shape[0], width)
    per_turn.scatter_add_(1, owner, token_level_rewards)
    rewards = per_turn[row, turn]
    turn_mask = response_mask.bool()[row] & (owner[row] == turn.unsqueeze(-1))
    groups = uid_group_ids(index, token_level_rewards.shape[0], rewards.device)[row]
    gamma = algorithm_gamma(config)
    turn_adv = trloo_advantages(rewards, groups, turn_mask, turn_index=turn, episode_ids=row, gamma=gamma)
    turn_returns = episode_returns(rewards, row, turn, gamma).unsqueeze(-1) * turn_mask
    advantages.index_add_(0, row, turn_adv.to(advantages.dtype))
    returns.index_add_(0, row, turn_returns.to(returns.dtype))
    return advantages, returns


def prime_for_verl(token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None,
                   process_rewards: Any = None, outcome_rewards: Any = None, **_: Any) -> tuple[Any, Any]:
    """`kernelrl_prime`: PRIME (`kernelrl.rl.prime_advantages`), RLOO per reward source.

    Data contract:

    - verl's own `compute_advantage` passes one reward tensor, so ``token_level_rewards`` is the
      process source: the dense implicit process rewards ``beta log pi_phi/pi_ref`` per token
      (`kernelrl.rl.implicit_process_rewards`, computed by the reward manager), and there is no
      outcome term;
    - with ``process_rewards [B, T]`` (from `compute_advantage_from_batch`), that is the process
      source and the outcome is ``outcome_rewards [B]`` or else ``token_level_rewards`` summed over the
      response (verl's layout: the verifier's score on the last token);
    - ``outcome_rewards [B]`` alone adds the outcome term to the first case.

    Options (`algorithm.kernelrl.*`): ``process_coef`` (1), ``outcome_coef`` (1 when an outcome is
    present), ``whiten`` (true); ``gamma`` is `algorithm.gamma`. Groups are the ``index`` uids.
    Returns (advantages, advantages) ``[B, T]``.
    """
    from kernelrl.rl import prime_advantages

    outcome = per_sample_tensor(outcome_rewards, token_level_rewards)
    if process_rewards is None:
        process = token_level_rewards
    else:
        process = process_rewards
        outcome = token_level_rewards.sum(-1) if outcome is None else outcome
    outcome_coef = outcome_coef_for(config, outcome, "kernelrl_prime")
    rewards = token_level_rewards.new_zeros(token_level_rewards.shape[0]) if outcome is None else outcome
    advantages = prime_advantages(
        rewards, uid_group_ids(index, rewards.shape[0], rewards.device), response_mask, process_rewards=process,
        process_coef=float(kernelrl_option(config, "process_coef", 1.0)), outcome_coef=outcome_coef,
        gamma=algorithm_gamma(config), whiten=bool(kernelrl_option(config, "whiten", True)))
    return advantages, advantages


def dedicated_estimators() -> dict[Any, Callable[..., Any]]:
    """kernelrl estimator function -> its dedicated verl adapter."""
    try:
        from kernelrl.rl import prime_advantages, token_reward_direct_advantages, trloo_advantages
    except ImportError:
        return {}
    return {trloo_advantages: trloo_for_verl, prime_advantages: prime_for_verl,
            token_reward_direct_advantages: direct_opd_for_verl}


#: keyword -> batch key that `compute_advantage_from_batch` forwards when the batch has it.
BATCH_EXTRAS = {"process_rewards": "process_rewards", "outcome_rewards": "outcome_rewards"}


def compute_advantage_from_batch(data: Any, adv_estimator: str, config: Any = None,
                                 extras: dict[str, str] | None = None) -> Any:
    """verl's `compute_advantage` for a registered estimator, also forwarding batch entries verl does not.

    Calls the estimator with verl's kwargs (``token_level_rewards``, ``response_mask``, ``config``,
    ``index`` = ``uid``) plus, for each ``keyword -> key`` of ``extras`` (default `BATCH_EXTRAS`) that the
    estimator names, ``data.batch[key]`` or ``data.non_tensor_batch[key]`` (e.g. a reward manager's
    ``reward_extra_info``). Use it in place of verl's `compute_advantage` (e.g. in a trainer subclass) for
    two-source PRIME or Direct-OPD with an outcome term; for verl's PRIME recipe layout pass
    ``extras={"process_rewards": "rm_scores", "outcome_rewards": "acc"}``. Writes ``advantages`` and
    ``returns`` ``[B, T]`` into ``data.batch`` and returns ``data``.
    """
    import numpy as np
    import torch
    from verl.trainer.ppo import core_algos

    fn = core_algos.get_adv_estimator_fn(adv_estimator)
    batch = data.batch
    rewards = batch["token_level_rewards"]
    if "response_mask" not in batch:
        batch["response_mask"] = batch["attention_mask"][:, -batch["responses"].shape[-1]:]
    kwargs: dict[str, Any] = {"token_level_rewards": rewards, "response_mask": batch["response_mask"], "config": config}
    if "uid" in data.non_tensor_batch:
        kwargs["index"] = data.non_tensor_batch["uid"]
    names = inspect.signature(fn).parameters
    for keyword, key in (BATCH_EXTRAS if extras is None else extras).items():
        if keyword not in names:
            continue
        if key in batch:
            kwargs[keyword] = batch[key]
        elif key in data.non_tensor_batch:
            kwargs[keyword] = torch.as_tensor(np.asarray(data.non_tensor_batch[key], dtype=np.float64),
                                              dtype=rewards.dtype, device=rewards.device)
    advantages, returns = fn(**kwargs)
    batch["advantages"] = advantages
    batch["returns"] = returns
    return data
