"""kernelrl policy losses in verl's calling convention (`adapt_loss`): inputs by alias, verl's clip
settings, and the rescale to verl's global-batch loss normalisation."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

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
