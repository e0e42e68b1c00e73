"""CoPRIS cross-stage log-prob stitching and per-token ratios, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import append_suffix_log_probs, lengths_to_mask, stitched_importance_ratio


def test_lengths_to_mask() -> None:
    assert lengths_to_mask(torch.tensor([2, 0, 3]), 3).tolist() == [[True, True, False], [False] * 3, [True] * 3]


def test_append_only_the_new_suffix() -> None:
    # row 0 has 2 tokens from version 0 (position 2 is stale garbage), row 1 has 1 token
    log_probs = t([[-1.0, -2.0, 9.0], [-3.0, 8.0, 8.0]])
    versions = torch.tensor([[0, 0, 5], [0, 7, 7]])
    suffix = t([[-4.0, -5.0], [-6.0, 7.0]])  # row 1 generated one new token only
    out = append_suffix_log_probs(log_probs, torch.tensor([2, 1]), suffix, torch.tensor([2, 1]), version=1,
                                  versions=versions)
    assert torch.equal(out.log_probs, t([[-1.0, -2.0, -4.0, -5.0], [-3.0, -6.0, 0.0, 0.0]]))
    assert out.versions.tolist() == [[0, 0, 1, 1], [0, 1, -1, -1]]
    assert out.lengths.tolist() == [4, 2]
    # a third stage appends to the stitched buffer again; earlier tokens keep their versions
    out2 = append_suffix_log_probs(out.log_probs, out.lengths, t([[math.nan], [-7.0]]), torch.tensor([0, 1]),
                                   version=2, versions=out.versions)
    assert torch.equal(out2.log_probs, t([[-1.0, -2.0, -4.0, -5.0], [-3.0, -6.0, -7.0, 0.0]]))
    assert out2.versions.tolist() == [[0, 0, 1, 1], [0, 1, 2, -1]]


def test_first_stage_from_empty_buffer() -> None:
    out = append_suffix_log_probs(torch.zeros(2, 0, dtype=torch.float64), torch.tensor([0, 0]), t([[-1.0, -2.0],
                                  [-3.0, 5.0]]), torch.tensor([2, 1]), version=0)
    assert torch.equal(out.log_probs, t([[-1.0, -2.0], [-3.0, 0.0]]))
    assert out.versions.tolist() == [[0, 0], [0, -1]]


def test_stitched_ratio() -> None:
    behaviour = t([[-1.0, -2.0, -4.0, -5.0], [-3.0, -6.0, 0.0, 0.0]])
    versions = torch.tensor([[0, 0, 1, 1], [0, 1, -1, -1]])
    mask = lengths_to_mask(torch.tensor([4, 2]), 4)
    current = (behaviour + t([[math.log(2.0), 0.0, math.log(0.5), 0.0], [0.0, math.log(3.0), math.nan, 0.0]]))
    current.requires_grad_(True)
    out = stitched_importance_ratio(current, behaviour, mask, versions=versions, current_version=1)
    assert torch.allclose(out.ratio, t([[2.0, 1.0, 0.5, 1.0], [1.0, 3.0, 0.0, 0.0]]))
    assert out.metrics["ratio_mean"].item() == pytest.approx(8.5 / 6)
    assert out.metrics["ratio_max"].item() == pytest.approx(3.0)
    assert out.metrics["version_lag_mean"].item() == pytest.approx(3 / 6)
    assert out.metrics["stale_token_frac"].item() == pytest.approx(3 / 6)
    out.ratio.sum().backward()  # d rho / d log pi = rho
    assert torch.allclose(current.grad, t([[2.0, 1.0, 0.5, 1.0], [1.0, 3.0, 0.0, 0.0]]))
    clipped = stitched_importance_ratio(current, behaviour, mask, clip=1.5)
    assert torch.allclose(clipped.ratio, t([[1.5, 1.0, 0.5, 1.0], [1.0, 1.5, 0.0, 0.0]]))
