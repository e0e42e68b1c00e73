"""verl bridge: reward functions that score through `kernelrl serve`, and our estimators/losses in verl's registries.

Rewards, in a verl config:

    custom_reward_function.path=<site-packages>/kernelrl/integrations/verl.py
    custom_reward_function.name=compute_score            # verl's per-sample (naive) reward manager
    # or name=compute_score_batch with reward_model.reward_manager=batch (evaluates a batch concurrently)

The service URL and token come from KERNELRL_SERVE_URL / KERNELRL_SERVE_TOKEN. A service that
cannot be reached raises (a silent 0 would corrupt training); a completion without code scores 0.
The score is a `kernelrl.rewards` entry, `DEFAULT_REWARD` unless `custom_reward_function.reward_kwargs`
name another (``+custom_reward_function.reward_kwargs.reward=coverage``, options under ``reward_options``).

Estimators and losses: `register_with_verl()` puts them in verl's registries of the calling process;
estimators run in the driver, losses in the Ray actor workers, so let verl import
`kernelrl.integrations.verl_plugin` (which calls it) everywhere with
`VERL_USE_EXTERNAL_MODULES=kernelrl.integrations.verl_plugin`. Then select
`algorithm.adv_estimator=kernelrl_<name>` and `actor_rollout_ref.actor.policy_loss.loss_mode=kernelrl_<name>`.
verl hands an estimator only `token_level_rewards`, `response_mask`, `index` (uids) and the
`algorithm` config; options go under `+algorithm.kernelrl.<option>=...`, the discount is `algorithm.gamma`.

- `kernelrl_trloo`: multi-turn TRLOO; turns are the runs of `response_mask == 1` (agent-loop
  rollouts), each turn's reward sits on its tokens (`trloo_for_verl`).
- `kernelrl_prime`: `token_level_rewards` are the implicit process rewards (`prime_for_verl`); for the
  outcome source too, compute advantages with `compute_advantage_from_batch`, which also forwards
  `process_rewards` / `outcome_rewards` batch entries.
- `kernelrl_opd` (= `kernelrl_token_reward_direct`): `token_level_rewards` are the teacher's log-prob
  gains on the student's tokens, e.g. from `teacher_log_prob_delta` in a reward manager (`direct_opd_for_verl`).
- The rest (`grpo`, `drgrpo`, `rloo`, `reinforce++`, ...) through the generic `adapt_estimator`; policy
  losses through `adapt_loss` (verl's clip settings and global-batch loss normalisation). Top-K
  Direct-OPD (`opd_topk`) is not registered: verl's actor gives a loss only the sampled tokens' log-probs.
  Nor is `gae`: verl hands a registered estimator no critic values (use verl's own ``adv_estimator=gae``).
"""

from __future__ import annotations

import concurrent.futures as cf
import inspect
from collections.abc import Callable
from typing import Any

from kernelrl.agent.extract import extract_code
from kernelrl.integrations.scoring import default_client, reward_from_result, reward_settings, task_spec

PREFIX = "kernelrl_"


def _job(solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None) -> tuple[Any, str, dict[str, Any]] | None:
    code = extract_code(solution_str)
    if code is None:
        return None
    extra = extra_info or {}
    options: dict[str, Any] = {"backend": extra.get("backend", "cpu"), "priority": int(extra.get("priority", 0))}
    if isinstance(extra.get("eval_config"), dict):
        options["config"] = extra["eval_config"]
    return task_spec(ground_truth, extra), code, options


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  **kwargs: Any) -> float:
    """verl's `compute_score` signature: extract the candidate from `solution_str`, evaluate it through
    the service, score the result with `reward_from_result` (kwargs ``reward`` / ``reward_options`` pick the
    `kernelrl.rewards` entry, default `DEFAULT_REWARD`); 0 without code."""
    reward, reward_options = reward_settings(kwargs)
    job = _job(solution_str, ground_truth, extra_info)
    if job is None:
        return 0.0
    task, code, options = job
    client = kwargs.get("client") or default_client()
    result = client.evaluate(task, code, **options)
    return reward_from_result(result, reward, reward_options)


def compute_score_batch(data_sources: list[str], solution_strs: list[str], ground_truths: list[Any],
                        extra_infos: list[dict[str, Any] | None] | None = None, **kwargs: Any) -> list[float]:
    """The batch form verl's `batch` reward manager calls: all candidates evaluated concurrently; scored as
    in `compute_score`."""
    reward, reward_options = reward_settings(kwargs)
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    client = kwargs.get("client") or default_client()
    scores = [0.0] * len(solution_strs)
    jobs = [(i, _job(s, g, e)) for i, (s, g, e) in enumerate(zip(solution_strs, ground_truths, extras, strict=True))]
    runnable = [(i, j) for i, j in jobs if j is not None]
    futures = {}
    with cf.ThreadPoolExecutor(max_workers=max(1, min(len(runnable), client.max_concurrency))) as threads:
        for i, (task, code, options) in runnable:
            futures[threads.submit(client.evaluate, task, code, **options)] = i
        for future, i in futures.items():
            scores[i] = reward_from_result(future.result(), reward, reward_options)
    return scores


# ---- our estimators and losses in verl's registries
#
# verl 0.9.1's `compute_advantage` calls a registered estimator with exactly
# `token_level_rewards [B, T]`, `response_mask [B, T]`, `config` (the `algorithm` config),
# `index` (the uid of each sample's prompt, when present) and `reward_baselines [B]` (ReMax only).
# Options for our estimators live under `algorithm.kernelrl` (e.g. `+algorithm.kernelrl.outcome_coef=0.5`);
# the discount is verl's own `algorithm.gamma`.

_ESTIMATOR_INPUTS = ("token_level_rewards", "response_mask", "mask", "rewards", "scores", "group_ids", "groups", "index",
                     "group_index", "config")


def _group_ids(index: Any, size: int, device: Any = None) -> Any:
    import torch

    if index is None:
        return torch.arange(size, device=device)
    lookup: dict[Any, int] = {}
    return torch.tensor([lookup.setdefault(key, len(lookup)) for key in list(index)], dtype=torch.long, device=device)


def _option(config: Any, key: str, default: Any) -> Any:
    """`algorithm.kernelrl.<key>` of verl's algorithm config (a DictConfig, AlgoConfig or dict), else `default`."""
    options = config.get("kernelrl") if config is not None and hasattr(config, "get") else None
    if options is None:
        return default
    value = options.get(key) if hasattr(options, "get") else getattr(options, key, None)
    return default if value is None else value


def _gamma(config: Any) -> float:
    value = config.get("gamma") if config is not None and hasattr(config, "get") else None
    return 1.0 if value is None else float(value)


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
        groups = _group_ids(index, scores.shape[0], scores.device)
        offered = {"token_level_rewards": token_level_rewards, "response_mask": response_mask, "mask": response_mask,
                   "rewards": scores, "scores": scores, "group_ids": groups, "groups": groups, "index": groups,
                   "group_index": groups, "config": config}
        kwargs = {k: v for k, v in offered.items() if k in params}
        if "gamma" in params:
            kwargs["gamma"] = _gamma(config)
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
    groups = _group_ids(index, token_level_rewards.shape[0], rewards.device)[row]
    gamma = _gamma(config)
    turn_adv = trloo_advantages(rewards, groups, turn_mask, turn_index=turn, episode_ids=row, gamma=gamma)
    turn_returns = episode_returns(rewards, row, turn, gamma).unsqueeze(-1) * turn_mask
    advantages.index_add_(0, row, turn_adv.to(advantages.dtype))
    returns.index_add_(0, row, turn_returns.to(returns.dtype))
    return advantages, returns


def _outcome_coef(config: Any, outcome: Any, estimator: str) -> float:
    coef = _option(config, "outcome_coef", None)
    if outcome is None:
        if coef not in (None, 0, 0.0):
            raise ValueError(f"{estimator}: algorithm.kernelrl.outcome_coef={coef} but no outcome rewards reached the "
                             "estimator; verl's compute_advantage forwards none, call compute_advantage_from_batch")
        return 0.0
    return 1.0 if coef is None else float(coef)


def _per_sample(values: Any, like: Any) -> Any:
    import torch

    return None if values is None else torch.as_tensor(values, dtype=like.dtype, device=like.device).reshape(-1)


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

    outcome = _per_sample(outcome_rewards, token_level_rewards)
    if process_rewards is None:
        process = token_level_rewards
    else:
        process = process_rewards
        outcome = token_level_rewards.sum(-1) if outcome is None else outcome
    outcome_coef = _outcome_coef(config, outcome, "kernelrl_prime")
    rewards = token_level_rewards.new_zeros(token_level_rewards.shape[0]) if outcome is None else outcome
    advantages = prime_advantages(
        rewards, _group_ids(index, rewards.shape[0], rewards.device), response_mask, process_rewards=process,
        process_coef=float(_option(config, "process_coef", 1.0)), outcome_coef=outcome_coef, gamma=_gamma(config),
        whiten=bool(_option(config, "whiten", True)))
    return advantages, advantages


def direct_opd_for_verl(token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None,
                        outcome_rewards: Any = None, **_: Any) -> tuple[Any, Any]:
    """`kernelrl_opd` / `kernelrl_token_reward_direct`: Direct-OPD's ``token_reward_direct`` advantage.

    Data contract: ``token_level_rewards [B, T]`` is the teacher's per-token gain
    ``log pi_T(a_t) - log pi_Tref(a_t)`` on the student's sampled tokens (a reward manager computes it,
    e.g. with `teacher_log_prob_delta`). ``A_t = token_coef * r_t``, plus ``outcome_coef`` times the GRPO
    outcome advantage when ``outcome_rewards [B]`` arrives (only through `compute_advantage_from_batch`;
    verl's own `compute_advantage` forwards no outcome). Options (`algorithm.kernelrl.*`):
    ``token_coef`` (1), ``outcome_coef`` (1 when an outcome is present). Returns (advantages, advantages).
    """
    from kernelrl.rl import token_reward_direct_advantages

    outcome = _per_sample(outcome_rewards, token_level_rewards)
    outcome_coef = _outcome_coef(config, outcome, "kernelrl_opd")
    groups = None if outcome is None else _group_ids(index, outcome.shape[0], outcome.device)
    advantages = token_reward_direct_advantages(outcome, groups, response_mask, token_rewards=token_level_rewards,
                                                token_coef=float(_option(config, "token_coef", 1.0)),
                                                outcome_coef=outcome_coef)
    return advantages, advantages


def _dedicated_estimators() -> dict[Any, Callable[..., Any]]:
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


def sampled_token_log_probs(model: Any, input_ids: Any, attention_mask: Any, response_length: int,
                            position_ids: Any = None) -> Any:
    """Log-probs a HF causal LM gives the last ``response_length`` tokens of verl's ``input_ids``.

    input_ids, attention_mask ``[B, L]`` (verl: left-padded prompt then right-padded response),
    position_ids ``[B, L]`` or None (then ``cumsum(attention_mask) - 1``) -> ``[B, response_length]`` float32.
    """
    import torch

    if position_ids is None:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logits = logits[:, -response_length - 1:-1].float()
    targets = input_ids[:, -response_length:]
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def teacher_log_prob_delta(teacher: Any, teacher_ref: Any, input_ids: Any, attention_mask: Any, responses: Any,
                           response_mask: Any = None, position_ids: Any = None, micro_batch_size: int = 8) -> Any:
    """Direct-OPD token reward for a verl batch: ``log pi_T(a_t) - log pi_Tref(a_t)`` on the response tokens.

    teacher / teacher_ref: HF causal LMs sharing the student's tokenizer. input_ids, attention_mask,
    position_ids ``[B, L]`` and responses ``[B, R]`` as in a verl batch; response_mask ``[B, R]``
    (default: the response part of attention_mask) -> ``[B, R]``, zero off the response mask
    (`kernelrl.rl.opd_token_rewards`). Use as ``token_level_rewards`` for ``kernelrl_opd``.
    """
    import torch

    from kernelrl.rl import opd_token_rewards

    length = responses.shape[-1]
    mask = attention_mask[:, -length:] if response_mask is None else response_mask
    teacher_lp, ref_lp = [], []
    with torch.no_grad():
        for start in range(0, input_ids.shape[0], micro_batch_size):
            part = slice(start, start + micro_batch_size)
            args = (input_ids[part], attention_mask[part], length, None if position_ids is None else position_ids[part])
            teacher_lp.append(sampled_token_log_probs(teacher, *args))
            ref_lp.append(sampled_token_log_probs(teacher_ref, *args))
    return opd_token_rewards(torch.cat(teacher_lp), torch.cat(ref_lp), mask)


# ---- policy losses

_LOSS_NAMES = {
    "old_log_prob": ("old_log_prob", "old_log_probs", "old_logprobs", "logprobs_old"),
    "log_prob": ("log_prob", "log_probs", "logprobs", "new_logprobs"),
    "advantages": ("advantages", "advantage"),
    "response_mask": ("response_mask", "mask"),
    "rollout_log_probs": ("rollout_log_probs", "rollout_logprobs", "behavior_logprobs"),
    "rollout_is_weights": ("rollout_is_weights", "weights", "is_weights"),
    "config": ("config",),
    "loss_agg_mode": ("loss_agg_mode", "aggregation", "agg"),
    "clip_low": ("clip_low",),
    "clip_high": ("clip_high",),
    "dual_clip": ("dual_clip",),
    "max_length": ("max_length",),
}
_LOSS_INPUTS = {alias for aliases in _LOSS_NAMES.values() for alias in aliases}


def _actor_settings(config: Any) -> dict[str, Any]:
    """verl actor config -> clip bounds, dual clip and the Dr. GRPO length, as verl's vanilla loss reads them."""
    if config is None or not hasattr(config, "get"):
        return {}
    clip = config.get("clip_ratio")
    low, high = config.get("clip_ratio_low"), config.get("clip_ratio_high")
    info = config.get("global_batch_info") or {}
    settings = {"clip_low": clip if low is None else low, "clip_high": clip if high is None else high,
                "dual_clip": config.get("clip_ratio_c"),
                "max_length": info.get("loss_scale_factor") or config.get("loss_scale_factor")}
    return {k: v for k, v in settings.items() if v is not None}


def _to_global(loss: Any, mask: Any, mode: str, config: Any) -> Any:
    """Rescale a loss aggregated over this micro-batch to verl's global-batch normalisation (`agg_loss`).

    verl sums micro-batch losses, each divided by the global token/sequence count
    (``config.global_batch_info``) and multiplied by the data-parallel size; a local mean over
    ``n`` tokens (sequences) becomes ``mean * n / N_global * dp_size``.
    """
    info = (config.get("global_batch_info") if config is not None and hasattr(config, "get") else None) or {}
    dp = info.get("dp_size") or 1
    m = mask.bool()
    if mode == "token-mean" and info.get("batch_num_tokens") is not None:
        return loss * (m.sum() / info["batch_num_tokens"] * dp)
    if mode.startswith("seq-mean") and info.get("global_batch_size") is not None:
        return loss * (m.any(-1).sum() / info["global_batch_size"] * dp)
    return loss


def adapt_loss(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a kernelrl policy loss for verl's convention
    `(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights) -> (loss, metrics)`.

    Each input is passed under whichever of its usual names the loss declares; from verl's actor
    config come ``clip_low``/``clip_high`` (``clip_ratio_low``/``_high``), ``dual_clip``
    (``clip_ratio_c``) and ``max_length`` (``loss_scale_factor``). A loss that takes the aggregation mode is
    rescaled to verl's global-batch normalisation (`_to_global`). Metrics get verl's ``actor/`` prefix.
    Raises TypeError when the loss needs inputs verl's interface does not carry.
    """
    params = inspect.signature(fn).parameters
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in _LOSS_INPUTS]
    if missing:
        raise TypeError(f"{getattr(fn, '__name__', fn)} needs inputs verl does not provide: {', '.join(missing)}")
    takes_mode = any(alias in params for alias in _LOSS_NAMES["loss_agg_mode"])

    def loss(old_log_prob: Any, log_prob: Any, advantages: Any, response_mask: Any, loss_agg_mode: str = "token-mean",
             config: Any = None, rollout_is_weights: Any = None, rollout_log_probs: Any = None,
             **_: Any) -> tuple[Any, dict[str, Any]]:
        given = {"old_log_prob": old_log_prob, "log_prob": log_prob, "advantages": advantages, "response_mask": response_mask,
                 "rollout_log_probs": rollout_log_probs, "rollout_is_weights": rollout_is_weights, "config": config,
                 "loss_agg_mode": loss_agg_mode, **_actor_settings(config)}
        kwargs = {alias: given[key] for key, aliases in _LOSS_NAMES.items() for alias in aliases
                  if alias in params and key in given}
        out = fn(**kwargs)
        if isinstance(out, tuple):
            value, metrics = out[0], (out[1] if len(out) > 1 and isinstance(out[1], dict) else {})
        else:
            value, metrics = out, {}
        if takes_mode:
            value = _to_global(value, response_mask, loss_agg_mode, config)
        return value, {(k if k.startswith("actor/") else f"actor/{k}"):
                       (v.item() if hasattr(v, "item") and getattr(v, "numel", lambda: 2)() == 1 else v)
                       for k, v in metrics.items()}

    loss.__name__ = f"verl_{getattr(fn, '__name__', 'loss')}"
    return loss


def register_with_verl(estimators: Any = None, losses: Any = None) -> dict[str, str]:
    """Register kernelrl's advantage estimators and policy losses in verl as `kernelrl_<name>`.

    `estimators`/`losses` default to `kernelrl.rl.ADVANTAGE_ESTIMATORS` / `kernelrl.rl.POLICY_LOSSES`
    (registries or name -> function mappings). TRLOO, PRIME and Direct-OPD get their dedicated adapters
    (`trloo_for_verl`, `prime_for_verl`, `direct_opd_for_verl`), the rest the generic ones. Returns
    name -> "registered" or "skipped: <why>" (an input verl's interface does not carry).
    Raises ImportError with a clear message when verl or kernelrl.rl is missing.
    """
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        raise ImportError(f"verl is not importable ({exc}); install verl to register kernelrl's estimators") from exc
    if estimators is None or losses is None:
        try:
            import kernelrl.rl as rl
        except ImportError as exc:
            raise ImportError(f"kernelrl.rl is not available ({exc}); nothing to register with verl") from exc
        estimators = getattr(rl, "ADVANTAGE_ESTIMATORS", {}) if estimators is None else estimators
        losses = getattr(rl, "POLICY_LOSSES", {}) if losses is None else losses
    dedicated = _dedicated_estimators()
    report: dict[str, str] = {}
    for kind, registry, adapt, add in (
        ("estimator", estimators, adapt_estimator, core_algos.register_adv_est),
        ("loss", losses, adapt_loss, core_algos.register_policy_loss),
    ):
        table = core_algos.ADV_ESTIMATOR_REGISTRY if kind == "estimator" else core_algos.POLICY_LOSS_REGISTRY
        for name in list(registry):
            fn = registry.get(name) if hasattr(registry, "get") else registry[name]
            verl_name = PREFIX + name
            special = dedicated.get(fn) if kind == "estimator" else None
            current = table.get(verl_name)
            if current is not None and (current is special or getattr(current, "__wrapped__", None) is fn):
                report[verl_name] = "registered"
                continue
            if special is not None:
                adapted = special
            else:
                try:
                    adapted = adapt(fn)
                except TypeError as exc:
                    report[verl_name] = f"skipped: {exc}"
                    continue
                adapted.__wrapped__ = fn  # type: ignore[attr-defined]
            table.pop(verl_name, None)
            add(verl_name)(adapted)
            report[verl_name] = "registered"
    return report
