"""The registries of `kernelrl.rl`: one per pluggable kind, so configs refer to algorithms by name.

Conventions shared by every entry:

- token tensors are ``[B, T]`` (batch, response positions) with a response mask ``[B, T]``
  (bool or 0/1; a position counts when it is nonzero); masked positions never influence a result
  and come back as zero;
- sample tensors are ``[B]``; groups (the samples drawn for one prompt) are an integer tensor
  ``group_ids [B]`` with arbitrary values;
- advantage estimators take ``(rewards, group_ids, response_mask, **extras)`` and return ``[B, T]``;
- policy losses return a `LossOutput` ``(loss, metrics)``;
- KL penalties take ``(log_prob, ref_log_prob, response_mask)`` and return ``[B, T]``;
- mismatch corrections take ``(train_log_prob, rollout_log_prob, response_mask, **bounds)`` and
  return a `Correction` ``(weights, mask, metrics)``;
- sample filters take ``(rewards, group_ids, **options)`` and return a keep mask ``[B]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelrl.registry import Registry

Fn = Callable[..., Any]

ADVANTAGE_ESTIMATORS: Registry[Fn] = Registry("advantage estimator")
POLICY_LOSSES: Registry[Fn] = Registry("policy loss")
LOSS_AGGREGATIONS: Registry[Fn] = Registry("loss aggregation")
KL_PENALTIES: Registry[Fn] = Registry("KL penalty")
MISMATCH_CORRECTIONS: Registry[Fn] = Registry("mismatch correction")
SAMPLE_FILTERS: Registry[Fn] = Registry("sample filter")
