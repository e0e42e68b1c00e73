"""Rollout/trainer mismatch corrections by hand: TIS, MIS, geometric rejection, token veto."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import (
    MISMATCH_CORRECTIONS,
    apply_corrections,
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


# Issue 16 (cross-check against verl / KernelGYM rollout correction): sequence-level modes clamp the
# aggregate log-ratio, not each token. Row 0: one catastrophic token (log rho = -40) and 2000 tokens at
# +0.01: exact sum -20, geometric mean exp(-20 / 2001) = 0.99005. Row 1: -60 and the same 2000 tokens
# (sum -40, clamped to -20). Row 2: three tokens at ratio 1. Clamping tokens first gave row 0 a sum
# of 0 (weight 1, kept by every bound).
N_LONG = 2001
CAT_LR = torch.zeros(3, N_LONG, dtype=torch.float64)
CAT_LR[0, 0], CAT_LR[0, 1:] = -40.0, 0.01
CAT_LR[1, 0], CAT_LR[1, 1:] = -60.0, 0.01
CAT_MASK = torch.ones(3, N_LONG, dtype=torch.bool)
CAT_MASK[2, 3:] = False
CAT_ROLLOUT = torch.full((3, N_LONG), -1.0, dtype=torch.float64)
CAT_TRAIN = CAT_ROLLOUT + CAT_LR


def test_sequence_tis_clamps_the_sum_not_the_tokens() -> None:
    c = sequence_tis(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK, upper=2.0)
    assert c.weights[0, 0].item() == pytest.approx(math.exp(-20.0), rel=1e-9)  # exp(-40 + 20), not 1
    assert c.weights[1, 0].item() == pytest.approx(math.exp(-20.0), rel=1e-9)  # exp(clamp(-40)) = exp(-20)
    assert torch.all(c.weights[0] == c.weights[0, 0]) and torch.all(c.weights[2, :3] == 1.0)
    assert torch.equal(c.mask, CAT_MASK)


def test_sequence_mis_rejects_on_the_exact_sum() -> None:
    # module default lower = 0 (only the upper bound masks): kept, but with weight e^-20 (was 1)
    c = sequence_mis(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK, upper=2.0)
    assert c.mask[0].all() and c.weights[0, 5].item() == pytest.approx(math.exp(-20.0), rel=1e-9)
    # with a lower bound (verl's default 1 / upper): the catastrophic sequences are rejected
    c = sequence_mis(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK, upper=2.0, lower=0.5)
    assert torch.equal(c.mask.any(-1), torch.tensor([False, False, True]))
    assert c.metrics["seq_mis/masked_seq_frac"].item() == pytest.approx(2 / 3)


def test_geometric_rejection_uses_the_exact_mean() -> None:
    # module defaults [0.999, 1.001]: g_0 = exp(-20 / 2001) = 0.99005 < 0.999 -> rejected
    assert math.exp(-20 / 2001) == pytest.approx(0.99005, abs=1e-5)
    c = geometric_rejection(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK)
    assert torch.equal(c.mask.any(-1), torch.tensor([False, False, True]))
    # a looser bound keeps row 0 (g = 0.99005) but not row 1 (g = exp(-40 / 2001) = 0.98021)
    c = geometric_rejection(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK, lower=0.985)
    assert torch.equal(c.mask.any(-1), torch.tensor([True, False, True]))
    g = [math.exp(-20 / 2001), math.exp(-40 / 2001), 1.0]
    assert c.metrics["geo_rs/geo_mean"].item() == pytest.approx(sum(g) / 3, rel=1e-9)


def test_token_modes_keep_per_token_clamp() -> None:
    c = token_tis(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK, upper=2.0)
    assert c.weights[0, 0].item() == pytest.approx(math.exp(-20.0), rel=1e-9)  # exp(clamp(-40)), not exp(-40)
    assert c.weights[1, 0].item() == pytest.approx(math.exp(-20.0), rel=1e-9)
    assert c.weights[0, 1].item() == pytest.approx(math.exp(0.01), rel=1e-9)
    c = token_mis(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK, upper=2.0)
    assert c.mask[0].all() and c.weights[1, 0].item() == pytest.approx(math.exp(-20.0), rel=1e-9)


def test_token_veto_compares_exact_log_ratio() -> None:
    # threshold below e^-20: a token at log rho = -40 must still veto its sequence
    c = token_veto(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK, threshold=1e-12)
    assert torch.equal(c.mask.any(-1), torch.tensor([False, False, True]))
    c = token_veto(CAT_TRAIN, CAT_ROLLOUT, CAT_MASK, threshold=1e-20)  # log = -46: only row 1 (-60)
    assert torch.equal(c.mask.any(-1), torch.tensor([True, False, True]))


def test_infinite_token_ratios_stay_finite() -> None:
    train = t([[-1.0, -math.inf, -1.0], [-1.0, -1.0, 0.0]])
    rollout = t([[-math.inf, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    mask = torch.ones(2, 3, dtype=torch.bool)
    for name in ["seq_tis", "seq_mis", "geo_rs", "token_tis", "token_mis", "token_veto"]:
        c = MISMATCH_CORRECTIONS.get(name)(train, rollout, mask)
        assert torch.isfinite(c.weights).all(), name
    assert not token_veto(train, rollout, mask).mask[0].any()  # a token with train prob 0 is vetoed


def test_apply_corrections_composes_sequence_mask_and_token_weights() -> None:
    # geometric rejection (a sequence mask) + token TIS (token weights) + token veto
    c = apply_corrections([("geo_rs", {"lower": 0.5, "upper": 1.2}), ("token_tis", {"upper": 2.0}), "token_veto"],
                          TRAIN, ROLLOUT, MASK)
    geo = geometric_rejection(TRAIN, ROLLOUT, MASK, lower=0.5, upper=1.2)
    tis = token_tis(TRAIN, ROLLOUT, MASK, upper=2.0)
    veto = token_veto(TRAIN, ROLLOUT, MASK)
    assert torch.equal(c.mask, geo.mask & tis.mask & veto.mask)
    assert torch.allclose(c.weights, t([[2.0, 0.5, 1.0], [0.0] * 3, [0.0] * 3]))
    assert {"geo_rs/geo_mean", "token_tis/clipped_frac", "token_veto/masked_seq_frac"} <= set(c.metrics)
    single = apply_corrections(["seq_tis"], TRAIN, ROLLOUT, MASK)
    assert torch.equal(single.weights, sequence_tis(TRAIN, ROLLOUT, MASK).weights)
    with pytest.raises(ValueError):
        apply_corrections([], TRAIN, ROLLOUT, MASK)
