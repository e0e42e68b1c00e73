"""What verl hands a registered estimator, read for kernelrl: uids as group ids, `algorithm` config options.

verl 0.9.1's `compute_advantage` calls a registered estimator with exactly
`token_level_rewards [B, T]`, `response_mask [B, T]`, `config` (the `algorithm` config),
`index` (the uid of each sample's prompt, when present) and `reward_baselines [B]` (ReMax only).
Options for our estimators live under `algorithm.kernelrl` (e.g. `+algorithm.kernelrl.outcome_coef=0.5`);
the discount is verl's own `algorithm.gamma`.
"""

from __future__ import annotations

from typing import Any


def uid_group_ids(index: Any, size: int, device: Any = None) -> Any:
    """verl's per-sample uids ``[B]`` -> long group ids ``[B]`` (0, 1, ... in order of first appearance);
    without uids every sample is its own group."""
    import torch

    if index is None:
        return torch.arange(size, device=device)
    lookup: dict[Any, int] = {}
    return torch.tensor([lookup.setdefault(key, len(lookup)) for key in list(index)], dtype=torch.long, device=device)


def kernelrl_option(config: Any, key: str, default: Any) -> Any:
    """`algorithm.kernelrl.<key>` of verl's algorithm config (a DictConfig, AlgoConfig or dict), else `default`."""
    options = config.get("kernelrl") if config is not None and hasattr(config, "get") else None
    if options is None:
        return default
    value = options.get(key) if hasattr(options, "get") else getattr(options, key, None)
    return default if value is None else value


def algorithm_gamma(config: Any) -> float:
    """verl's ``algorithm.gamma``, 1 when unset."""
    value = config.get("gamma") if config is not None and hasattr(config, "get") else None
    return 1.0 if value is None else float(value)


def outcome_coef_for(config: Any, outcome: Any, estimator: str) -> float:
    """``algorithm.kernelrl.outcome_coef`` (1 when unset) if an outcome reward arrived, else 0; raises when a
    non-zero coefficient is set but no outcome reached `estimator`."""
    coef = kernelrl_option(config, "outcome_coef", None)
    if outcome is None:
        if coef not in (None, 0, 0.0):
            raise ValueError(f"{estimator}: algorithm.kernelrl.outcome_coef={coef} but no outcome rewards reached the "
                             "estimator; verl's compute_advantage forwards none, call compute_advantage_from_batch")
        return 0.0
    return 1.0 if coef is None else float(coef)


def per_sample_tensor(values: Any, like: Any) -> Any:
    """`values` as a flat tensor of `like`'s dtype and device; None stays None."""
    import torch

    return None if values is None else torch.as_tensor(values, dtype=like.dtype, device=like.device).reshape(-1)
