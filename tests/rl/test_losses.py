"""PPO clip (clip-higher, dual clip), aggregation modes, KL k1/k2/k3 and entropy, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import (
    KL_PENALTIES,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    aggregate_loss,
    entropy_bonus,
    entropy_from_logits,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_loss,
    ppo_clip_loss,
)

# five valid tokens (row 0: three, row 1: two) and one masked garbage slot
RATIO = t([[1.5, 0.5, 0.5], [5.0, 1.1, 1.0]])
ADV = t([[1.0, 1.0, -1.0], [-1.0, 2.0, math.nan]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
OLD = t([[-1.0, -2.0, -0.5], [-3.0, -1.0, 0.0]])


def new_log_prob() -> torch.Tensor:
    lp = OLD + RATIO.log()
    lp[1, 2] = math.inf  # garbage in the masked slot
    return lp.requires_grad_(True)


def test_ppo_clip_higher_hand_case() -> None:
    # clip_low 0.2, clip_high 0.28:
    # rho 1.5, A  1: max(-1.5, -1.28) = -1.28 (clipped high)
    # rho 0.5, A  1: max(-0.5, -0.8)  = -0.5
    # rho 0.5, A -1: max(0.5, 0.8)    =  0.8  (clipped low)
    # rho 5,   A -1: max(5, 1.28)     =  5
    # rho 1.1, A  2: max(-2.2, -2.2)  = -2.2
    lp = new_log_prob()
    out = ppo_clip_loss(lp, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28)
    assert out.loss.item() == pytest.approx((-1.28 - 0.5 + 0.8 + 5.0 - 2.2) / 5)
    assert out.metrics["clip_frac"].item() == pytest.approx(2 / 5)
    assert out.metrics["clip_frac_high"].item() == pytest.approx(1 / 5)
    assert out.metrics["clip_frac_low"].item() == pytest.approx(1 / 5)
    assert out.metrics["dual_clip_frac"].item() == 0.0
    out.loss.backward()
    # d/dlp of -A rho = -A rho; clipped tokens have zero gradient; /5 from token-mean
    expected = t([[0.0, -0.5 / 5, 0.0], [5.0 / 5, -2.2 / 5, 0.0]])
    assert torch.allclose(lp.grad, expected)


def test_ppo_symmetric_clip_default() -> None:
    # clip_high None -> 0.2: first token becomes max(-1.5, -1.2) = -1.2
    out = ppo_clip_loss(new_log_prob(), OLD, ADV, MASK, clip_low=0.2)
    assert out.loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 5.0 - 2.2) / 5)


def test_ppo_dual_clip() -> None:
    # rho 5, A -1: min(5, -3 * -1) = 3, and its gradient vanishes
    lp = new_log_prob()
    out = ppo_clip_loss(lp, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    assert out.loss.item() == pytest.approx((-1.28 - 0.5 + 0.8 + 3.0 - 2.2) / 5)
    assert out.metrics["dual_clip_frac"].item() == pytest.approx(1 / 5)
    out.loss.backward()
    assert lp.grad[1, 0].item() == 0.0
    with pytest.raises(ValueError):
        ppo_clip_loss(lp, OLD, ADV, MASK, dual_clip=1.0)


def test_ppo_weights_and_seq_aggregation() -> None:
    weights = t([[2.0, 1.0, 1.0], [0.5, 1.0, math.nan]])
    out = ppo_clip_loss(new_log_prob(), OLD, ADV, MASK, clip_low=0.2, clip_high=0.28, weights=weights,
                        agg="seq-mean-token-sum")
    # row 0: 2*-1.28 - 0.5 + 0.8 = -2.26; row 1: 0.5*5 - 2.2 = 0.3; mean of sums = -0.98
    assert out.loss.item() == pytest.approx((-2.26 + 0.3) / 2)
    assert out.metrics["approx_kl"].item() == pytest.approx(-(math.log(1.5) + 2 * math.log(0.5) + math.log(5) +
                                                             math.log(1.1)) / 5)


LOSS = t([[1.0, 2.0, 3.0], [4.0, math.nan, math.inf], [9.0, 9.0, 9.0]])
AGG_MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "max_length", "expected"),
    [
        ("token-mean", None, 10 / 4),
        ("seq-mean-token-mean", None, (2 + 4) / 2),
        ("seq-mean-token-sum", None, (6 + 4) / 2),
        ("seq-mean-token-sum-norm", 10, 10 / (2 * 10)),
        ("seq-mean-token-sum-norm", None, 10 / (2 * 3)),
    ],
)
def test_aggregation_modes(mode: str, max_length: int | None, expected: float) -> None:
    assert aggregate_loss(LOSS, AGG_MASK, mode, max_length=max_length).item() == pytest.approx(expected)
    assert LOSS_AGGREGATIONS.get(mode)(LOSS, AGG_MASK, max_length=max_length).item() == pytest.approx(expected)


def test_aggregation_empty_mask_is_zero_and_unknown_mode_fails() -> None:
    empty = torch.zeros(2, 3)
    for mode in LOSS_AGGREGATIONS:
        assert aggregate_loss(LOSS[:2], empty, mode).item() == 0.0
    with pytest.raises(KeyError):
        aggregate_loss(LOSS, AGG_MASK, "token-median")
    with pytest.raises(ValueError):
        aggregate_loss(LOSS, AGG_MASK, "seq-mean-token-sum-norm", max_length=0)


def test_kl_estimators_by_hand() -> None:
    # token 0: pi 0.5, ref 0.25; token 1: pi 0.25, ref 0.5; token 2 masked garbage
    lp = t([[math.log(0.5), math.log(0.25), math.nan]])
    ref = t([[math.log(0.25), math.log(0.5), 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    ln2 = math.log(2)
    assert torch.allclose(kl_k1(lp, ref, mask), t([[ln2, -ln2, 0.0]]))
    assert torch.allclose(kl_k2(lp, ref, mask), t([[ln2**2 / 2, ln2**2 / 2, 0.0]]))
    # k3 = (r - 1) - log r with r = ref/pi: r = 0.5 -> -0.5 + ln2; r = 2 -> 1 - ln2
    assert torch.allclose(kl_k3(lp, ref, mask), t([[ln2 - 0.5, 1 - ln2, 0.0]]))
    assert kl_loss(lp, ref, mask, kind="k3").item() == pytest.approx(0.5 / 2)
    assert kl_loss(lp, ref, mask, kind="k1", agg="seq-mean-token-sum").item() == pytest.approx(0.0)
    assert KL_PENALTIES.get("low_var_kl") is kl_k3


def test_kl_k3_nonnegative_and_finite_for_extreme_ratios() -> None:
    lp = t([[0.0, -1000.0]])
    ref = t([[-1000.0, 0.0]])
    out = kl_k3(lp, ref, torch.ones(1, 2))
    assert torch.isfinite(out).all() and (out >= 0).all()


def test_entropy_by_hand() -> None:
    logits = t([[[0.0, 0.0], [0.0, math.log(3.0)]]])
    h = entropy_from_logits(logits)
    h1 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert torch.allclose(h, t([[math.log(2), h1]]))
    bonus = entropy_bonus(h, torch.tensor([[1, 1]]), coef=0.01)
    assert bonus.item() == pytest.approx(-0.01 * (math.log(2) + h1) / 2)


def test_policy_loss_registry() -> None:
    assert POLICY_LOSSES.get("ppo") is ppo_clip_loss
    assert "opd_topk" in POLICY_LOSSES
