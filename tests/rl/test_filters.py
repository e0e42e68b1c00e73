"""Dynamic sampling, accuracy-range filter and overlong penalty, by hand."""

from __future__ import annotations

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import (
    SAMPLE_FILTERS,
    accuracy_range_filter,
    overlong_filter,
    overlong_penalty,
    zero_variance_filter,
)


def test_zero_variance_filter() -> None:
    # group 0: 1, 1 (no variance); group 1: 0, 1; group 2 alone; group 3 alone
    keep = zero_variance_filter(t([1.0, 1.0, 0.0, 1.0, 0.0, 0.5]), torch.tensor([0, 0, 1, 1, 2, 3]))
    assert keep.tolist() == [False, False, True, True, False, False]
    keep = zero_variance_filter(t([1.0, 1.05, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]), eps=0.1)
    assert keep.tolist() == [False, False, True, True]


def test_accuracy_range_filter() -> None:
    # accuracies: g0 1/5 = 0.2 (kept, inclusive), g1 0.8 (kept), g2 1.0, g3 0.0, g4 0.5
    rewards = t([*[1, 0, 0, 0, 0], *[1, 1, 1, 1, 0], *[1, 1], *[0, 0], *[1, 0]])
    groups = torch.tensor([0] * 5 + [1] * 5 + [2] * 2 + [3] * 2 + [4] * 2)
    keep = accuracy_range_filter(rewards, groups)
    assert keep.tolist() == [True] * 10 + [False] * 4 + [True] * 2
    assert SAMPLE_FILTERS.get("accuracy_range") is accuracy_range_filter
    assert SAMPLE_FILTERS.get("dynamic_sampling") is zero_variance_filter


def test_overlong_penalty() -> None:
    # L_max 100, L_cache 20: <= 80 -> 0; 90 -> (80 - 90)/20 = -0.5; 100 -> -1; > 100 -> -1
    lengths = torch.tensor([50, 80, 90, 100, 101])
    assert torch.allclose(overlong_penalty(lengths, max_length=100, buffer_length=20),
                          torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))
    assert torch.allclose(overlong_penalty(lengths, max_length=100, buffer_length=20, penalty=2.0),
                          torch.tensor([0.0, 0.0, -1.0, -2.0, -2.0]))
    with pytest.raises(ValueError):
        overlong_penalty(lengths, max_length=10, buffer_length=20)


def test_overlong_filter() -> None:
    assert overlong_filter(torch.tensor([5, 10]), max_length=10).tolist() == [True, False]
    assert overlong_filter(torch.tensor([5, 10]), torch.tensor([1, 0]), max_length=10).tolist() == [False, True]
