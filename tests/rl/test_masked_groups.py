"""Masked reductions and per-group statistics, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl.groups import group_index, group_mean_std, group_sum_count, key_ids, leave_one_out_mean
from kernelrl.rl.masked import (
    last_token_index,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    place_at_last_token,
    reverse_cumsum,
    sum_of_squares,
    zero_masked,
)

X = t([[1.0, 2.0, math.nan], [4.0, math.inf, 6.0]])
M = torch.tensor([[1, 1, 0], [1, 0, 1]])


def test_masked_reductions() -> None:
    assert torch.equal(zero_masked(X, M), t([[1.0, 2.0, 0.0], [4.0, 0.0, 6.0]]))
    assert masked_sum(X, M).item() == 13.0
    assert torch.equal(masked_sum(X, M, -1), t([3.0, 10.0]))
    assert torch.equal(masked_mean(X, M, -1), t([1.5, 5.0]))
    # values 1, 2, 4, 6: mean 3.25, squared deviations 5.0625 + 1.5625 + 0.5625 + 7.5625 = 14.75
    assert masked_var(X, M).item() == pytest.approx(14.75 / 4)
    assert masked_var(X, M, unbiased=True).item() == pytest.approx(14.75 / 3)
    w = masked_whiten(X, M, eps=0.0)
    assert torch.allclose(w, (zero_masked(X, M) - 3.25) / math.sqrt(14.75 / 4) * M)
    assert torch.allclose(masked_whiten(X, M, eps=0.0, shift_mean=False), (w + 3.25) * M)
    assert sum_of_squares(t([[1.0, 2.0], [3.0, 0.0]])).item() == 14.0
    assert masked_mean(X, torch.zeros(2, 3)).item() == 0.0


def test_last_token_and_placement() -> None:
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]])
    assert last_token_index(mask).tolist() == [1, 3, -1, 0]
    out = place_at_last_token(t([5.0, 6.0, 7.0, 8.0]), mask)
    assert torch.equal(out, t([[0, 5, 0, 0], [0, 0, 0, 6], [0, 0, 0, 0], [8, 0, 0, 0]]))


def test_reverse_cumsum_by_hand() -> None:
    r = t([[1.0, 2.0, 4.0], [1.0, math.nan, 2.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 1]])
    assert torch.equal(reverse_cumsum(r, m), t([[7.0, 6.0, 4.0], [3.0, 0.0, 2.0]]))
    # gamma 0.5: row 0: G2 = 4, G1 = 2 + 2 = 4, G0 = 1 + 2 = 3; row 1 skips the hole: G0 = 1 + 1 = 2
    assert torch.equal(reverse_cumsum(r, m, 0.5), t([[3.0, 4.0, 4.0], [2.0, 0.0, 2.0]]))


def test_group_statistics() -> None:
    ids = torch.tensor([30, 10, 30, 30, 20])
    v = t([1.0, 5.0, 2.0, 6.0, 3.0])
    index = group_index(ids)
    assert index.num_groups == 3 and index.inverse.tolist() == [2, 0, 2, 2, 1]
    total, count = group_sum_count(v, index)
    assert total.tolist() == [5.0, 3.0, 9.0] and count.tolist() == [1.0, 1.0, 3.0]
    mean, std = group_mean_std(v, index)
    # group 30: 1, 2, 6 -> mean 3, sample var (4 + 1 + 9) / 2 = 7
    assert torch.allclose(mean, t([3.0, 5.0, 3.0, 3.0, 3.0]))
    assert torch.allclose(std, t([math.sqrt(7), 0.0, math.sqrt(7), math.sqrt(7), 0.0]))
    _, pop = group_mean_std(v, index, unbiased=False)
    assert pop[0].item() == pytest.approx(math.sqrt(14 / 3))
    # leave-one-out: 1 -> (2 + 6)/2 = 4; 2 -> 3.5; 6 -> 1.5; singletons -> 0
    assert torch.allclose(leave_one_out_mean(v, index), t([4.0, 0.0, 3.5, 1.5, 0.0]))
    valid = torch.tensor([True, True, True, False, True])  # 6 is not a member
    assert torch.allclose(leave_one_out_mean(v, index, valid), t([2.0, 0.0, 1.0, 0.0, 0.0]))
    mean_v, std_v = group_mean_std(v, index, valid)
    assert mean_v[0].item() == pytest.approx(1.5) and std_v[0].item() == pytest.approx(math.sqrt(0.5))


def test_key_ids_number_typed_keys_in_sorted_order() -> None:
    keys = [(2, 0), (0, 1), (2, 0), (0, 0), (1, 3)]
    assert key_ids(keys).tolist() == [3, 1, 3, 0, 2]
    # the same groups as the old packed id group * 1000 + turn, without its collision at turn 1000
    packed = torch.tensor([g * 1000 + t for g, t in keys])
    assert torch.equal(group_index(key_ids(keys)).inverse, group_index(packed).inverse)
    assert key_ids([(0, 1000), (1, 0)]).tolist() == [0, 1]
