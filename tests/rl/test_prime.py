"""PRIME implicit process rewards, PRM loss, normalisation and advantages, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import (
    implicit_process_rewards,
    normalize_process_rewards,
    prime_advantages,
    prm_cross_entropy_loss,
)


def test_implicit_process_rewards() -> None:
    out = implicit_process_rewards(t([[-1.0, -2.0, math.nan]]), t([[-2.0, -2.0, 0.0]]), torch.tensor([[1, 1, 0]]),
                                   beta=0.5)
    assert torch.allclose(out, t([[0.5, 0.0, 0.0]]))


def test_prm_cross_entropy() -> None:
    # row 0 sums to ln 3 -> sigma = 3/4, label 1: -ln(3/4); row 1 sums to 0 -> 1/2, label 0: ln 2
    rewards = t([[math.log(3.0), 0.0, math.nan], [1.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss = prm_cross_entropy_loss(rewards, mask, t([1.0, 0.0]))
    assert loss.item() == pytest.approx((-math.log(0.75) + math.log(2.0)) / 2)


def test_prm_loss_gradient_moves_towards_label() -> None:
    rewards = t([[0.2, 0.1]]).requires_grad_(True)
    prm_cross_entropy_loss(rewards, torch.ones(1, 2), t([1.0])).backward()
    # d/dx [log(1+e^x) - x] = sigma(x) - 1 < 0 for each token of the sum x = 0.3
    s = 1 / (1 + math.exp(-0.3))
    assert torch.allclose(rewards.grad, t([[s - 1, s - 1]]))


def test_normalize_process_rewards() -> None:
    # returns-to-go: row 0: -0.5, -1.5, 0.5; row 1: 3 -> divide by 3
    rewards = t([[1.0, -2.0, 0.5], [3.0, math.inf, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    out = normalize_process_rewards(rewards, mask, eps=0.0)
    assert torch.allclose(out, t([[1 / 3, -2 / 3, 0.5 / 3], [1.0, 0.0, 0.0]]))


# rows 0, 1: one group (outcomes 1, 0); row 2 alone (outcome 1)
PROC = t([[1.0, 3.0], [4.0, math.nan], [0.5, 0.5]])
MASK = torch.tensor([[1, 1], [1, 0], [1, 1]])
OUTCOME = t([1.0, 0.0, 1.0])
GROUPS = torch.tensor([0, 0, 1])


def test_prime_advantages_without_whitening() -> None:
    # process scores (token means): 2, 4, 0.5; LOO baselines 4, 2, 0 (alone)
    # row 0: (1-4, 3-4) -> returns (-4, -1); row 1: (4-2) -> 2; row 2: returns (1, 0.5)
    # outcome LOO: 1 - 0 = 1, 0 - 1 = -1, alone keeps 1
    out = prime_advantages(OUTCOME, GROUPS, MASK, process_rewards=PROC, whiten=False)
    assert torch.allclose(out, t([[-3.0, 0.0], [1.0, 0.0], [2.0, 1.5]]))
    out = prime_advantages(OUTCOME, GROUPS, MASK, process_rewards=PROC, process_coef=0.5, outcome_coef=2.0,
                           whiten=False)
    assert torch.allclose(out, t([[0.0, 1.5], [-1.0, 0.0], [2.5, 2.25]]))


def test_prime_advantages_whitened() -> None:
    out = prime_advantages(OUTCOME, GROUPS, MASK, process_rewards=PROC, eps=0.0)
    values = [-3.0, 0.0, 1.0, 2.0, 1.5]  # valid entries of the unwhitened case, mean 0.3
    var = sum((v - 0.3) ** 2 for v in values) / 5  # 3.16
    expected = (t([[-3.0, 0.0], [1.0, 0.0], [2.0, 1.5]]) - 0.3) / math.sqrt(var)
    expected[1, 1] = 0.0
    assert torch.allclose(out, expected)


def test_prime_gamma() -> None:
    # gamma 0.5, row 0 process part: -3 + 0.5 * -1 = -3.5, -1
    out = prime_advantages(OUTCOME, GROUPS, MASK, process_rewards=PROC, gamma=0.5, outcome_coef=0.0, whiten=False)
    assert torch.allclose(out[0], t([-3.5, -1.0]))
