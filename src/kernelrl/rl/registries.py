"""The registries of `kernelrl.rl`: one per pluggable kind, so configs refer to algorithms by name.

Conventions shared by every entry:

- token tensors are ``[B, T]`` (batch, response positions) with a response mask ``[B, T]``
  (bool or 0/1; a position counts when it is nonzero); masked positions never influence a result
  and come back as zero;
- sample tensors are ``[B]``; groups (the samples drawn for one prompt) are an integer tensor
  ``group_ids [B]`` with arbitrary values;
- advantage estimators take ``(rewards, group_ids, response_mask, **extras)`` and return ``[B, T]``;
  what they need beyond that (a critic's values, process rewards, episodes) they declare with
  `declare_inputs`, and a trainer reads `estimator_inputs(name)` rather than the name;
- policy losses return a `LossOutput` ``(loss, metrics)``;
- KL penalties take ``(log_prob, ref_log_prob, response_mask)`` and return ``[B, T]``;
- mismatch corrections take ``(train_log_prob, rollout_log_prob, response_mask, **bounds)`` and
  return a `Correction` ``(weights, mask, metrics)``;
- sample filters take ``(rewards, group_ids, **options)`` and return a keep mask ``[B]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelrl.registry import Registry

Fn = Callable[..., Any]

ADVANTAGE_ESTIMATORS: Registry[Fn] = Registry("advantage estimator")
POLICY_LOSSES: Registry[Fn] = Registry("policy loss")
LOSS_AGGREGATIONS: Registry[Fn] = Registry("loss aggregation")
KL_PENALTIES: Registry[Fn] = Registry("KL penalty")
MISMATCH_CORRECTIONS: Registry[Fn] = Registry("mismatch correction")
SAMPLE_FILTERS: Registry[Fn] = Registry("sample filter")


@dataclass(frozen=True)
class EstimatorInputs:
    """What an advantage estimator needs beyond ``(rewards, group_ids, response_mask)``.

    ``values``: a learned critic's per-token values (the trainer keeps a critic; PPO with GAE).
    ``process_rewards``: implicit process rewards (the trainer keeps a PRM and a frozen reference; PRIME).
    ``episodes``: ``episode_ids``, ``turn_index`` and ``gamma``; its ``group_ids`` are the prompts alone,
    since it keys turns itself (TRLOO); the others get (prompt, turn) groups.
    """

    values: bool = False
    process_rewards: bool = False
    episodes: bool = False


_ESTIMATOR_INPUTS: dict[Fn, EstimatorInputs] = {}


def declare_inputs(**needs: bool) -> Callable[[Fn], Fn]:
    """Decorator for an advantage estimator: the `EstimatorInputs` it needs (a flag per input)."""
    inputs = EstimatorInputs(**needs)

    def declare(fn: Fn) -> Fn:
        _ESTIMATOR_INPUTS[fn] = inputs
        return fn

    return declare


def estimator_inputs(name: str) -> EstimatorInputs:
    """The inputs the advantage estimator `name` declared (none beyond the usual: all False)."""
    return _ESTIMATOR_INPUTS.get(ADVANTAGE_ESTIMATORS.get(name), EstimatorInputs())
