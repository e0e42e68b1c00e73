"""RL algorithm library: pure tensor math, one registry per kind.

Pick an algorithm by name, e.g. ``ADVANTAGE_ESTIMATORS.get("grpo")(rewards, group_ids, mask)``.
Shapes: token tensors ``[B, T]`` with a response mask; per-sample tensors ``[B]``; groups given by
an integer ``group_ids [B]``. See `kernelrl.rl.registries` for the calling conventions.
"""

from kernelrl.rl.advantages import (
    drgrpo_advantages,
    episode_returns,
    grpo_advantages,
    grpo_sequence_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    rloo_sequence_advantages,
    trloo_advantages,
)
from kernelrl.rl.aggregation import (
    aggregate_loss,
    seq_mean_token_mean,
    seq_mean_token_sum,
    seq_mean_token_sum_norm,
    token_mean,
)
from kernelrl.rl.copris import (
    Stitched,
    StitchedRatio,
    append_suffix_log_probs,
    lengths_to_mask,
    stitched_importance_ratio,
)
from kernelrl.rl.filters import accuracy_range_filter, overlong_filter, overlong_penalty, zero_variance_filter
from kernelrl.rl.kl import (
    entropy_bonus,
    entropy_from_logits,
    kl_exact,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_loss,
    kl_penalty,
)
from kernelrl.rl.losses import LossOutput, ppo_clip_loss, ppo_clip_token_loss
from kernelrl.rl.mismatch import (
    Correction,
    combine_corrections,
    geometric_rejection,
    sequence_mis,
    sequence_tis,
    token_mis,
    token_tis,
    token_veto,
)
from kernelrl.rl.opd import (
    TopKRewards,
    adaptive_kl_coef,
    opd_regularized_token_rewards,
    opd_token_rewards,
    opd_topk_clipped_loss,
    opd_topk_rewards,
    token_reward_direct_advantages,
    topk_candidate_weights,
    topk_candidates,
)
from kernelrl.rl.prime import (
    implicit_process_rewards,
    normalize_process_rewards,
    prime_advantages,
    prm_cross_entropy_loss,
)
from kernelrl.rl.registries import (
    ADVANTAGE_ESTIMATORS,
    KL_PENALTIES,
    LOSS_AGGREGATIONS,
    MISMATCH_CORRECTIONS,
    POLICY_LOSSES,
    SAMPLE_FILTERS,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_PENALTIES",
    "LOSS_AGGREGATIONS",
    "MISMATCH_CORRECTIONS",
    "POLICY_LOSSES",
    "SAMPLE_FILTERS",
    "Correction",
    "LossOutput",
    "Stitched",
    "StitchedRatio",
    "TopKRewards",
    "accuracy_range_filter",
    "adaptive_kl_coef",
    "aggregate_loss",
    "append_suffix_log_probs",
    "combine_corrections",
    "drgrpo_advantages",
    "entropy_bonus",
    "entropy_from_logits",
    "episode_returns",
    "geometric_rejection",
    "grpo_advantages",
    "grpo_sequence_advantages",
    "implicit_process_rewards",
    "kl_exact",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_loss",
    "kl_penalty",
    "lengths_to_mask",
    "normalize_process_rewards",
    "opd_regularized_token_rewards",
    "opd_token_rewards",
    "opd_topk_clipped_loss",
    "opd_topk_rewards",
    "overlong_filter",
    "overlong_penalty",
    "ppo_clip_loss",
    "ppo_clip_token_loss",
    "prime_advantages",
    "prm_cross_entropy_loss",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "rloo_advantages",
    "rloo_sequence_advantages",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
    "sequence_mis",
    "sequence_tis",
    "stitched_importance_ratio",
    "token_mean",
    "token_mis",
    "token_reward_direct_advantages",
    "token_tis",
    "token_veto",
    "topk_candidate_weights",
    "topk_candidates",
    "trloo_advantages",
    "zero_variance_filter",
]
