"""Direct-OPD rewards, top-K weights, per-candidate clipped loss, advantage and controller, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import (
    adaptive_kl_coef,
    kl_exact,
    kl_k3,
    opd_regularized_token_rewards,
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


def test_regularized_token_reward() -> None:
    # r = 2 (log T - log Tref) - .5 (log pi - log pi_0); masked garbage gives 0
    out = opd_regularized_token_rewards(t([[-1.0, math.nan]]), t([[-1.5, 0.0]]), t([[-0.2, math.inf]]),
                                        t([[-0.6, 0.0]]), torch.tensor([[1, 0]]), reward_scale=2.0, kl_coef=0.5)
    assert torch.allclose(out, t([[2 * 0.5 - 0.5 * 0.4, 0.0]]))
    # equal coefficients and pi_0 = pi_Tref: the reward is log pi_T - log pi (negative reverse KL to the teacher)
    same = opd_regularized_token_rewards(t([[-1.0]]), t([[-1.5]]), t([[-0.2]]), t([[-1.5]]), torch.ones(1, 1))
    assert same.item() == pytest.approx(-1.0 + 0.2)


def test_kl_exact() -> None:
    p, q = t([[[L(0.5), L(0.5)], [L(0.9), L(0.1)]]]), t([[[L(0.25), L(0.75)], [L(0.5), L(0.5)]]])
    out = kl_exact(p, q, torch.tensor([[1, 0]]))
    assert out[0, 0].item() == pytest.approx(0.5 * L(2.0) + 0.5 * L(0.5 / 0.75))
    assert out[0, 1].item() == 0.0


# one state, four tokens: the teacher's RL raised token 3 twenty-fold
T_REF = t([[0.6, 0.3, 0.09, 0.01]]).log()
T_RL = t([[0.5, 0.2, 0.1, 0.2]]).log()


def _student_optimum(mode: str, reward_scale: float = 1.0, steps: int = 3000) -> torch.Tensor:
    """Gradient ascent from pi_0 = pi_Tref with the *expected* policy gradient of each objective
    (exact sums over the four tokens in place of samples)."""
    theta = T_REF.clone().requires_grad_(True)
    opt = torch.optim.SGD([theta], lr=0.5)
    mask = torch.ones(1, 4, dtype=torch.bool)
    for _ in range(steps):
        lp = torch.log_softmax(theta, -1)
        pi = lp.exp()
        if mode == "reward":  # score-function surrogate: grad = E_pi[r grad log pi]
            loss = -(pi * opd_regularized_token_rewards(T_RL, T_REF, lp, T_REF, mask, reward_scale=reward_scale)).sum()
        else:  # the earlier method: reward log T/Tref plus a k3 KL loss on the sampled tokens
            loss = -(pi * opd_token_rewards(T_RL, T_REF, mask)).sum() + (pi.detach() * kl_k3(lp, T_REF, mask)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.softmax(theta, -1).detach()


def test_regularized_reward_optimum_is_the_teacher() -> None:
    assert torch.allclose(_student_optimum("reward"), T_RL.exp(), atol=1e-6)
    # reward_scale 2 extrapolates: pi ~ pi_Tref (pi_T / pi_Tref)^2
    assert torch.allclose(_student_optimum("reward", 2.0), torch.softmax(2 * T_RL - T_REF, -1), atol=1e-6)
    # a k3 KL *loss* has the forward-KL gradient; its optimum pi = pi_Tref / (c - r) overshoots token 3
    k3 = _student_optimum("k3_loss")
    c = (T_RL - T_REF + T_REF.exp() / k3)[0]  # stationarity: r(a) + pi_Tref(a) / pi(a) is one constant
    assert torch.allclose(c, c.mean().expand(4), atol=1e-4)
    assert k3[0, 3].item() > 3 * T_RL.exp()[0, 3].item()


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
