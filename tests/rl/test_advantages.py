"""Hand-computed cases for GRPO, Dr. GRPO, RLOO and REINFORCE++."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import (
    ADVANTAGE_ESTIMATORS,
    drgrpo_advantages,
    grpo_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)

# group 7: rewards 1, 0, 2 (rows 0, 2, 4); group 3: reward 5 alone (row 1); group 9: 0, 4 (rows 3, 5)
REWARDS = t([1.0, 5.0, 0.0, 0.0, 2.0, 4.0])
GROUPS = torch.tensor([7, 3, 7, 9, 7, 9])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0], [0, 1, 1], [1, 1, 0]])


def per_token(values: list[float]) -> torch.Tensor:
    return t(values).unsqueeze(-1) * MASK.to(torch.float64)


def test_grpo_hand_case() -> None:
    # group 7: mean 1, sample std sqrt((0 + 1 + 1) / 2) = 1 -> 0, -1, 1
    # group 9: mean 2, sample std sqrt((4 + 4) / 1) = 2 sqrt 2 -> -1/sqrt2, 1/sqrt2; group of one -> 0
    s = 1 / math.sqrt(2)
    out = grpo_advantages(REWARDS, GROUPS, MASK, eps=0.0)
    assert torch.allclose(out, per_token([0.0, 0.0, -1.0, -s, 1.0, s]))


def test_grpo_eps_is_added_to_std() -> None:
    out = grpo_advantages(t([0.0, 2.0]), torch.tensor([0, 0]), torch.ones(2, 1), eps=0.5)
    # std = sqrt(2), advantages = ∓1 / (sqrt 2 + 0.5)
    assert torch.allclose(out[:, 0], t([-1.0, 1.0]) / (math.sqrt(2) + 0.5))


def test_drgrpo_hand_case() -> None:
    out = drgrpo_advantages(REWARDS, GROUPS, MASK)
    assert torch.allclose(out, per_token([0.0, 0.0, -1.0, -2.0, 1.0, 2.0]))


def test_rloo_hand_case() -> None:
    # group 7: 1 - (0+2)/2 = 0; 0 - (1+2)/2 = -1.5; 2 - (1+0)/2 = 1.5; group 9: 0-4, 4-0; alone: keeps 5
    out = rloo_advantages(REWARDS, GROUPS, MASK)
    assert torch.allclose(out, per_token([0.0, 5.0, -1.5, -4.0, 1.5, 4.0]))


def test_reinforce_pp_outcome_only() -> None:
    # token rewards [[0, 1, 0], [-1, 0, 0]] -> returns [[1, 1, .], [-1, ., .]] over valid tokens 1, 1, -1
    # mean 1/3, population var 8/9 -> (2/3)/(2 sqrt2 / 3) = 1/sqrt2 and (-4/3)/(2 sqrt2 / 3) = -sqrt2
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = reinforce_pp_advantages(t([1.0, -1.0]), None, mask, eps=0.0)
    s = 1 / math.sqrt(2)
    assert torch.allclose(out, t([[s, s, 0.0], [-math.sqrt(2), 0.0, 0.0]]))


def test_reinforce_pp_kl_and_gamma() -> None:
    # r_t = [-0.1*0.5, -0.1*1.0, 2 - 0] = [-0.05, -0.1, 2]; gamma 0.5: G2 = 2, G1 = 0.9, G0 = 0.4
    mask = torch.ones(1, 3)
    kl = t([[0.5, 1.0, 0.0]])
    out = reinforce_pp_advantages(t([2.0]), None, mask, token_kl=kl, kl_coef=0.1, gamma=0.5, eps=0.0)
    returns = t([[0.4, 0.9, 2.0]])
    mean = 1.1  # (0.4 + 0.9 + 2.0) / 3
    std = math.sqrt((0.7**2 + 0.2**2 + 0.9**2) / 3)
    assert torch.allclose(out, (returns - mean) / std)


def test_reinforce_pp_gamma_skips_masked_holes() -> None:
    # valid tokens at 0 and 2; the hole at 1 is not a discount step: G0 = 0 + 0.5 * 4 = 2, G2 = 4
    mask = torch.tensor([[1, 0, 1], [1, 1, 1]])
    out = reinforce_pp_advantages(t([4.0, 0.0]), None, mask, gamma=0.5, eps=0.0)
    returns = t([2.0, 4.0, 0.0, 0.0, 0.0])  # row 1 gets returns 0, 0, 0
    mean, std = returns.mean(), returns.std(unbiased=False)
    assert torch.allclose(out[0], t([(2.0 - mean) / std, 0.0, (4.0 - mean) / std]))


def test_reinforce_pp_baseline() -> None:
    # group 0: 1, 3 -> -1, 1; group 1: 2 alone -> 0; whitened over the 3 tokens: var 2/3
    out = reinforce_pp_baseline_advantages(t([1.0, 3.0, 2.0]), torch.tensor([0, 0, 1]), torch.ones(3, 1), eps=0.0)
    assert torch.allclose(out[:, 0], t([-1.0, 1.0, 0.0]) / math.sqrt(2 / 3))


def test_registry_names_resolve_to_estimators() -> None:
    for name in ["grpo", "drgrpo", "rloo", "reinforce++", "reinforce++-baseline", "trloo", "prime", "opd"]:
        assert name in ADVANTAGE_ESTIMATORS
    assert ADVANTAGE_ESTIMATORS.get("rloo") is rloo_advantages
    via_registry = ADVANTAGE_ESTIMATORS.get("grpo")(REWARDS, GROUPS, MASK, eps=0.0)
    assert torch.allclose(via_registry, grpo_advantages(REWARDS, GROUPS, MASK, eps=0.0))


def test_shape_errors() -> None:
    with pytest.raises(ValueError):
        grpo_advantages(t([1.0, 2.0]), torch.tensor([0, 0]), torch.ones(3, 2))
    with pytest.raises(ValueError):
        rloo_advantages(t([1.0, 2.0]), torch.tensor([0, 0, 1]), torch.ones(2, 2))


def test_sequence_level_variants_match_the_token_broadcast() -> None:
    from kernelrl.rl import grpo_sequence_advantages, rloo_sequence_advantages

    s = 1 / math.sqrt(2)
    assert torch.allclose(grpo_sequence_advantages(REWARDS, GROUPS, eps=0.0), t([0.0, 0.0, -1.0, -s, 1.0, s]))
    assert torch.allclose(rloo_sequence_advantages(REWARDS, GROUPS), t([0.0, 5.0, -1.5, -4.0, 1.5, 4.0]))


def test_reinforce_pp_kl_undiscounted_with_hole_and_padding() -> None:
    import statistics

    # row 0: r = 2, KL 0.5, 1, 0 (coef 0.1): returns 2 - 0.15 = 1.85, 2 - 0.1 = 1.9, 2
    # row 1: r = 1, valid tokens 0 and 2 with KL 1, 1 (coef 0.1): returns 1 - 0.2 = 0.8, 1 - 0.1 = 0.9
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 0]])
    kl = torch.tensor([[0.5, 1.0, 0.0, math.nan], [1.0, math.inf, 1.0, 9.0]], dtype=torch.float32)
    out = reinforce_pp_advantages(t([2.0, 1.0]), None, mask, token_kl=kl, kl_coef=0.1, eps=0.0)
    returns = [1.85, 1.9, 2.0, 0.8, 0.9]
    mean, std = statistics.fmean(returns), statistics.pstdev(returns)
    expected = t([[1.85, 1.9, 2.0, mean], [0.8, mean, 0.9, mean]])
    assert torch.allclose(out, (expected - mean) / std)
    assert out.dtype == torch.float64
