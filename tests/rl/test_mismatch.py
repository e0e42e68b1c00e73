"""Rollout/trainer mismatch corrections by hand: TIS, MIS, geometric rejection, token veto."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import (
    MISMATCH_CORRECTIONS,
    combine_corrections,
    geometric_rejection,
    sequence_mis,
    sequence_tis,
    token_mis,
    token_tis,
    token_veto,
)

# per-token ratios pi_train / pi_rollout: row 0: 3, 0.5, 1; row 1: 1.2, 1e-5, (masked); row 2 empty
RATIOS = t([[3.0, 0.5, 1.0], [1.2, 1e-5, 1.0], [1.0, 1.0, 1.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
ROLLOUT = t([[-1.0, -2.0, -0.3], [-0.7, -4.0, math.nan], [math.inf, 0.0, 0.0]])
TRAIN = ROLLOUT + RATIOS.log()
TRAIN[1, 2] = -math.inf
F = MASK.bool()


def test_token_tis() -> None:
    c = token_tis(TRAIN, ROLLOUT, MASK, upper=2.0)
    assert torch.allclose(c.weights, t([[2.0, 0.5, 1.0], [1.2, 1e-5, 0.0], [0.0, 0.0, 0.0]]))
    assert torch.equal(c.mask, F)
    assert c.metrics["token_tis/clipped_frac"].item() == pytest.approx(1 / 5)
    assert c.metrics["token_tis/ratio_mean"].item() == pytest.approx((3 + 0.5 + 1 + 1.2 + 1e-5) / 5)
    assert c.metrics["token_tis/masked_token_frac"].item() == 0.0
    k3 = sum(r - 1 - math.log(r) for r in [3, 0.5, 1, 1.2, 1e-5]) / 5
    assert c.metrics["token_tis/kl_k3"].item() == pytest.approx(k3)


def test_sequence_tis() -> None:
    # products: row 0: 1.5, row 1: 1.2e-5
    c = sequence_tis(TRAIN, ROLLOUT, MASK, upper=2.0)
    assert torch.allclose(c.weights, t([[1.5, 1.5, 1.5], [1.2e-5, 1.2e-5, 0.0], [0.0, 0.0, 0.0]]))
    assert c.metrics["seq_tis/clipped_seq_frac"].item() == 0.0
    c = sequence_tis(TRAIN, ROLLOUT, MASK, upper=1.4)
    assert c.weights[0, 0].item() == pytest.approx(1.4)
    assert c.metrics["seq_tis/clipped_seq_frac"].item() == pytest.approx(1 / 2)


def test_token_mis() -> None:
    c = token_mis(TRAIN, ROLLOUT, MASK, upper=2.0, lower=0.1)
    assert torch.equal(c.mask, torch.tensor([[False, True, True], [True, False, False], [False] * 3]))
    assert torch.allclose(c.weights, t([[0.0, 0.5, 1.0], [1.2, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert c.metrics["token_mis/masked_token_frac"].item() == pytest.approx(2 / 5)
    assert c.metrics["token_mis/masked_seq_frac"].item() == 0.0


def test_sequence_mis() -> None:
    c = sequence_mis(TRAIN, ROLLOUT, MASK, upper=2.0, lower=0.01)
    assert torch.equal(c.mask, torch.tensor([[True] * 3, [False] * 3, [False] * 3]))
    assert torch.allclose(c.weights[0], t([1.5, 1.5, 1.5]))
    assert c.metrics["seq_mis/masked_seq_frac"].item() == pytest.approx(1 / 2)


def test_geometric_rejection() -> None:
    # geometric means: row 0: 1.5 ** (1/3) = 1.1447, row 1: sqrt(1.2e-5) = 0.00346
    c = geometric_rejection(TRAIN, ROLLOUT, MASK, lower=0.5, upper=1.2)
    assert torch.equal(c.mask, torch.tensor([[True] * 3, [False] * 3, [False] * 3]))
    assert torch.allclose(c.weights, torch.where(c.mask, t(1.0), t(0.0)))
    assert c.metrics["geo_rs/geo_mean"].item() == pytest.approx((1.5 ** (1 / 3) + math.sqrt(1.2e-5)) / 2)
    c = geometric_rejection(TRAIN, ROLLOUT, MASK, lower=0.5, upper=1.1)
    assert not c.mask.any()


def test_token_veto() -> None:
    c = token_veto(TRAIN, ROLLOUT, MASK, threshold=1e-4)
    assert torch.equal(c.mask, torch.tensor([[True] * 3, [False] * 3, [False] * 3]))
    c = token_veto(TRAIN, ROLLOUT, MASK, threshold=1e-6)
    assert torch.equal(c.mask, F)


def test_combine() -> None:
    c = combine_corrections(token_tis(TRAIN, ROLLOUT, MASK, upper=2.0), token_veto(TRAIN, ROLLOUT, MASK))
    assert torch.allclose(c.weights, t([[2.0, 0.5, 1.0], [0.0] * 3, [0.0] * 3]))
    assert "token_tis/clipped_frac" in c.metrics and "token_veto/masked_seq_frac" in c.metrics
    with pytest.raises(ValueError):
        combine_corrections()


def test_weights_are_detached() -> None:
    train = TRAIN.clone().requires_grad_(True)
    c = token_tis(train, ROLLOUT, MASK)
    assert not c.weights.requires_grad


def test_registry() -> None:
    for name in ["token_tis", "seq_tis", "token_mis", "seq_mis", "geo_rs", "token_veto"]:
        c = MISMATCH_CORRECTIONS.get(name)(TRAIN, ROLLOUT, MASK)
        assert c.weights.shape == MASK.shape and c.mask.dtype == torch.bool
