"""verl bridge: reward functions that score through `kernelrl serve`, and our estimators/losses in verl's registries.

In a verl config:

    custom_reward_function.path=<site-packages>/kernelrl/integrations/verl.py
    custom_reward_function.name=compute_score            # verl's per-sample (naive) reward manager
    # or name=compute_score_batch with reward_model.reward_manager=batch (evaluates a batch concurrently)

The service URL and token come from KERNELRL_SERVE_URL / KERNELRL_SERVE_TOKEN. A service that
cannot be reached raises (a silent 0 would corrupt training); a completion without code scores 0.
Call `register_with_verl()` (e.g. from a verl entry-point wrapper) to make kernelrl's advantage
estimators and policy losses selectable as `algorithm.adv_estimator=kernelrl_<name>` and
`actor.policy_loss.loss_mode=kernelrl_<name>`.
"""

from __future__ import annotations

import concurrent.futures as cf
import inspect
from collections.abc import Callable
from typing import Any

from kernelrl.integrations.scoring import default_client, extract_code, reward_from_result, task_spec

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
    the service, return 0 (not correct) or 1 + clipped speedup bonus. `max_bonus` may come in kwargs."""
    job = _job(solution_str, ground_truth, extra_info)
    if job is None:
        return 0.0
    task, code, options = job
    client = kwargs.get("client") or default_client()
    result = client.evaluate(task, code, **options)
    return reward_from_result(result, max_bonus=float(kwargs.get("max_bonus", 1.0)))


def compute_score_batch(data_sources: list[str], solution_strs: list[str], ground_truths: list[Any],
                        extra_infos: list[dict[str, Any] | None] | None = None, **kwargs: Any) -> list[float]:
    """The batch form verl's `batch` reward manager calls: all candidates evaluated concurrently."""
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
            scores[i] = reward_from_result(future.result(), max_bonus=float(kwargs.get("max_bonus", 1.0)))
    return scores


# ---- our estimators and losses in verl's registries

_ESTIMATOR_INPUTS = ("token_level_rewards", "response_mask", "mask", "rewards", "scores", "group_ids", "groups", "index",
                     "group_index", "config")


def _group_ids(index: Any, size: int) -> Any:
    import torch

    if index is None:
        return torch.arange(size)
    lookup: dict[Any, int] = {}
    return torch.tensor([lookup.setdefault(key, len(lookup)) for key in list(index)], dtype=torch.long)


def adapt_estimator(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a kernelrl estimator for verl's calling convention
    `(token_level_rewards (B, T), response_mask (B, T), index=uids, config=...) -> (advantages, returns)`.

    The estimator receives whichever of these it names: `token_level_rewards`, `response_mask`/`mask`,
    `rewards`/`scores` (B,) = summed token rewards, `group_ids`/`groups`/`index`/`group_index` (B,)
    long, `config`. A (B,) result is broadcast over the response tokens; returns = advantages.
    """
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in _ESTIMATOR_INPUTS]
    if missing:
        raise TypeError(f"{getattr(fn, '__name__', fn)} needs inputs verl does not provide: {', '.join(missing)}")

    def estimator(token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None, **extra: Any) -> Any:
        scores = token_level_rewards.sum(dim=-1)
        groups = _group_ids(index, scores.shape[0]).to(scores.device)
        offered = {"token_level_rewards": token_level_rewards, "response_mask": response_mask, "mask": response_mask,
                   "rewards": scores, "scores": scores, "group_ids": groups, "groups": groups, "index": groups,
                   "group_index": groups, "config": config}
        kwargs = {k: v for k, v in offered.items() if k in params}
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


_LOSS_NAMES = {
    "old_log_prob": ("old_log_prob", "old_log_probs", "old_logprobs", "logprobs_old"),
    "log_prob": ("log_prob", "log_probs", "logprobs", "new_logprobs"),
    "advantages": ("advantages", "advantage"),
    "response_mask": ("response_mask", "mask"),
    "rollout_log_probs": ("rollout_log_probs", "rollout_logprobs", "behavior_logprobs"),
    "config": ("config",),
    "loss_agg_mode": ("loss_agg_mode", "aggregation"),
}


def adapt_loss(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a kernelrl policy loss for verl's convention
    `(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_log_probs) -> (loss, metrics)`;
    each input is passed under whichever of its usual names the loss declares."""
    params = inspect.signature(fn).parameters

    def loss(old_log_prob: Any, log_prob: Any, advantages: Any, response_mask: Any, loss_agg_mode: str = "token-mean",
             config: Any = None, rollout_log_probs: Any = None, **_: Any) -> tuple[Any, dict[str, Any]]:
        given = {"old_log_prob": old_log_prob, "log_prob": log_prob, "advantages": advantages, "response_mask": response_mask,
                 "rollout_log_probs": rollout_log_probs, "config": config, "loss_agg_mode": loss_agg_mode}
        kwargs = {alias: given[key] for key, aliases in _LOSS_NAMES.items() for alias in aliases if alias in params}
        out = fn(**kwargs)
        if isinstance(out, tuple):
            value, metrics = out[0], (out[1] if len(out) > 1 and isinstance(out[1], dict) else {})
        else:
            value, metrics = out, {}
        return value, {k: (v.item() if hasattr(v, "item") and getattr(v, "numel", lambda: 2)() == 1 else v) for k, v in metrics.items()}

    loss.__name__ = f"verl_{getattr(fn, '__name__', 'loss')}"
    return loss


def register_with_verl(estimators: Any = None, losses: Any = None) -> dict[str, str]:
    """Register kernelrl's advantage estimators and policy losses in verl as `kernelrl_<name>`.

    `estimators`/`losses` default to `kernelrl.rl.ADVANTAGE_ESTIMATORS` / `kernelrl.rl.POLICY_LOSSES`
    (registries or name -> function mappings). Returns name -> "registered" or the reason it was not.
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
    report: dict[str, str] = {}
    for kind, registry, adapt, add in (
        ("estimator", estimators, adapt_estimator, core_algos.register_adv_est),
        ("loss", losses, adapt_loss, core_algos.register_policy_loss),
    ):
        table = core_algos.ADV_ESTIMATOR_REGISTRY if kind == "estimator" else core_algos.POLICY_LOSS_REGISTRY
        for name in list(registry):
            fn = registry.get(name) if hasattr(registry, "get") else registry[name]
            verl_name = PREFIX + name
            if verl_name in table and getattr(table[verl_name], "__wrapped__", None) is fn:
                report[verl_name] = "registered"
                continue
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
