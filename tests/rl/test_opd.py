"""Direct-OPD rewards, top-K weights, per-candidate clipped loss, advantage and controller, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import (
    adaptive_kl_coef,
    opd_token_rewards,
    opd_topk_clipped_loss,
    opd_topk_rewards,
    token_reward_direct_advantages,
    topk_candidate_weights,
    topk_candidates,
)

L = math.log


def test_sampled_token_reward() -> None:
    out = opd_token_rewards(t([[-1.0, -0.5, math.nan]]), t([[-1.5, -0.25, 1.0]]), torch.tensor([[1, 1, 0]]))
    assert torch.allclose(out, t([[0.5, -0.25, 0.0]]))


def test_topk_candidates_and_weights() -> None:
    ids, lp = topk_candidates(t([[[L(0.5), L(0.2), L(0.3)]]]), 2)
    assert ids.tolist() == [[[0, 2]]]
    assert torch.allclose(lp, t([[[L(0.5), L(0.3)]]]))
    teacher = t([[[L(0.1), L(0.3)]]])
    assert torch.allclose(topk_candidate_weights(lp, teacher, weighting="student"), t([[[0.625, 0.375]]]))
    assert torch.allclose(topk_candidate_weights(lp, teacher, weighting="teacher"), t([[[0.25, 0.75]]]))
    assert torch.allclose(topk_candidate_weights(lp, None, weighting="unweighted"), t([[[0.5, 0.5]]]))
    with pytest.raises(ValueError):
        topk_candidate_weights(lp, None, weighting="teacher")
    with pytest.raises(ValueError):
        topk_candidate_weights(lp, teacher, weighting="geometric")


# one valid position with candidates (pi_S .5, .3), (pi_T .1, .3), (pi_Tref .2, .1); a masked garbage position
STUDENT = t([[[L(0.5), L(0.3)], [math.nan, 0.0]]])
TEACHER = t([[[L(0.1), L(0.3)], [math.inf, 0.0]]])
TEACHER_REF = t([[[L(0.2), L(0.1)], [0.0, -math.inf]]])
MASK = torch.tensor([[1, 0]])


def test_topk_rewards() -> None:
    out = opd_topk_rewards(STUDENT, TEACHER, TEACHER_REF, MASK, weighting="student")
    # deltas ln(.1/.2) = ln .5, ln(.3/.1) = ln 3; reward .625 ln .5 + .375 ln 3
    assert torch.allclose(out.deltas, t([[[L(0.5), L(3.0)], [0.0, 0.0]]]))
    assert out.rewards[0, 0].item() == pytest.approx(0.625 * L(0.5) + 0.375 * L(3.0))
    assert out.rewards[0, 1].item() == 0.0
    unweighted = opd_topk_rewards(STUDENT, TEACHER, TEACHER_REF, MASK, weighting="unweighted")
    assert unweighted.rewards[0, 0].item() == pytest.approx(0.5 * (L(0.5) + L(3.0)))


def test_topk_clipped_loss() -> None:
    rw = opd_topk_rewards(STUDENT, TEACHER, TEACHER_REF, MASK, weighting="student")
    old = STUDENT.clone()
    cur = (old + L(1.5)).requires_grad_(True)  # both candidates at ratio 1.5
    out = opd_topk_clipped_loss(cur, old, rw.deltas, rw.weights, MASK, clip_low=0.2, clip_high=0.2)
    # candidate 0: A = ln .5 < 0: max(-A 1.5, -A 1.2) = -1.5 ln .5 (not clipped)
    # candidate 1: A = ln 3 > 0: max(-1.5 ln 3, -1.2 ln 3) = -1.2 ln 3 (clipped)
    expected = 0.625 * (-1.5 * L(0.5)) + 0.375 * (-1.2 * L(3.0))
    assert out.loss.item() == pytest.approx(expected)
    assert out.metrics["clip_frac"].item() == pytest.approx(0.375)
    out.loss.backward()
    # gradient only through the unclipped candidate: 0.625 * (-A rho)
    assert cur.grad[0, 0, 0].item() == pytest.approx(0.625 * -L(0.5) * 1.5)
    assert cur.grad[0, 0, 1].item() == 0.0
    assert cur.grad[0, 1].abs().sum().item() == 0.0


def test_token_reward_direct() -> None:
    tok = t([[0.1, 0.2], [0.3, 0.4]])
    mask = torch.ones(2, 2)
    assert torch.allclose(token_reward_direct_advantages(None, None, mask, token_rewards=tok), tok)
    # GRPO on outcomes 1, 0: mean .5, sample std 1/sqrt2 -> ±1/sqrt2; scaled by .5
    out = token_reward_direct_advantages(t([1.0, 0.0]), torch.tensor([4, 4]), mask, token_rewards=tok,
                                         token_coef=2.0, outcome_coef=0.5, eps=0.0)
    h = 0.5 / math.sqrt(2)
    assert torch.allclose(out, t([[0.2 + h, 0.4 + h], [0.6 - h, 0.8 - h]]))
    with pytest.raises(ValueError):
        token_reward_direct_advantages(None, None, mask, token_rewards=tok, outcome_coef=1.0)


def test_adaptive_kl_coef() -> None:
    assert adaptive_kl_coef(0.1, 0.3, rate=0.5) == pytest.approx(0.15)
    assert adaptive_kl_coef(0.1, t(-0.3), rate=0.5) == pytest.approx(0.05)
    assert adaptive_kl_coef(0.1, 0.0, rate=0.5) == pytest.approx(0.1)
    assert adaptive_kl_coef(0.9, 1.0, rate=0.5, max_coef=1.0) == 1.0
    assert adaptive_kl_coef(0.01, -1.0, rate=0.5, min_coef=0.008) == 0.008
    with pytest.raises(ValueError):
        adaptive_kl_coef(0.1, 1.0, rate=1.5)
