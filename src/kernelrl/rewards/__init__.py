"""Kernel rewards: functions ``EvalResult -> float`` registered by name (`REWARDS`; every caller's default
is `DEFAULT_REWARD`), plus profiling-based rejection sampling (`prs_keep_probability`, `prs_keep_mask`)."""

from kernelrl.rewards.kernel import (
    DEFAULT_REWARD,
    REWARDS,
    autotriton_reward,
    compile_reward,
    compiled,
    coverage,
    coverage_reward,
    get_reward,
    milestone_reward,
    rule_violations,
    speedup_reward,
    speedup_vs_compile_reward,
    weighted_reward,
)
from kernelrl.rewards.prs import prs_keep_mask, prs_keep_probability

__all__ = [
    "DEFAULT_REWARD",
    "REWARDS",
    "autotriton_reward",
    "compile_reward",
    "compiled",
    "coverage",
    "coverage_reward",
    "get_reward",
    "milestone_reward",
    "prs_keep_mask",
    "prs_keep_probability",
    "rule_violations",
    "speedup_reward",
    "speedup_vs_compile_reward",
    "weighted_reward",
]
