"""GAE and the clipped value loss against straightforward per-row Python loops written here."""

from __future__ import annotations

import math

import pytest
import torch
from rl_helpers import F64, t

from kernelrl.rl import ADVANTAGE_ESTIMATORS, clipped_value_loss, gae_advantages


def loop_gae(r: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
             ) -> tuple[list[list[float]], list[list[float]]]:
    """Eq. 16 one row at a time over the list of valid positions: A_t = sum_l (gamma lam)^l delta_{t+l}."""
    adv = [[0.0] * mask.shape[1] for _ in range(mask.shape[0])]
    ret = [[0.0] * mask.shape[1] for _ in range(mask.shape[0])]
    for b in range(mask.shape[0]):
        idx = [j for j in range(mask.shape[1]) if mask[b, j]]
        vals = [float(v[b, j]) for j in idx] + [0.0]  # V = 0 after the episode ends
        deltas = [float(r[b, j]) + gamma * vals[k + 1] - vals[k] for k, j in enumerate(idx)]
        for k, j in enumerate(idx):
            adv[b][j] = sum((gamma * lam) ** n * d for n, d in enumerate(deltas[k:]))
            ret[b][j] = adv[b][j] + vals[k]
    return adv, ret


def loop_whiten(x: list[list[float]], mask: torch.Tensor, eps: float = 1e-8) -> list[list[float]]:
    valid = [x[b][j] for b in range(mask.shape[0]) for j in range(mask.shape[1]) if mask[b, j]]
    mean = sum(valid) / len(valid)
    var = sum((a - mean) ** 2 for a in valid) / len(valid)
    return [[(x[b][j] - mean) / math.sqrt(var + eps) if mask[b, j] else 0.0 for j in range(mask.shape[1])]
            for b in range(mask.shape[0])]


def padded_mask(lengths: list[int], width: int, side: str) -> torch.Tensor:
    pos = torch.arange(width)
    right = pos < torch.tensor(lengths).unsqueeze(-1)
    return right if side == "right" else right.flip(-1)


def garbage(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """NaN wherever the mask is off: such positions must never reach a result."""
    return torch.where(mask, x, torch.full_like(x, math.nan))


MASKS = {
    "right": padded_mask([5, 3, 1, 6], 6, "right"),
    "left": padded_mask([5, 3, 1, 6], 6, "left"),
    "holes": torch.tensor([[1, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]]).bool(),
}


@pytest.mark.parametrize("layout", sorted(MASKS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_a_python_loop(layout: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    mask = MASKS[layout]
    r = garbage(torch.randn(mask.shape, generator=gen, dtype=F64), mask)
    v = garbage(torch.randn(mask.shape, generator=gen, dtype=F64), mask)
    gamma, lam = [(0.99, 0.95), (0.7, 0.3), (1.0, 0.9)][seed]
    adv, ret = gae_advantages(r, v, mask, gamma, lam)
    want_adv, want_ret = loop_gae(r, v, mask, gamma, lam)
    assert torch.allclose(adv, t(want_adv)) and torch.allclose(ret, t(want_ret))
    whitened, ret_w = gae_advantages(r, v, mask, gamma, lam, whiten=True)
    assert torch.allclose(whitened, t(loop_whiten(want_adv, mask)))
    assert torch.equal(ret_w, ret)  # value targets come from the unwhitened advantages


def test_left_and_right_padding_give_the_same_advantages() -> None:
    gen = torch.Generator().manual_seed(5)
    right, left = MASKS["right"], MASKS["left"]
    r, v = torch.randn(4, 6, generator=gen, dtype=F64), torch.randn(4, 6, generator=gen, dtype=F64)
    # move each row's valid entries from the right-padded layout to the left-padded one
    r_left, v_left = torch.zeros_like(r), torch.zeros_like(v)
    r_left[left], v_left[left] = r[right], v[right]
    a_right, _ = gae_advantages(r, v, right, 0.9, 0.8)
    a_left, _ = gae_advantages(r_left, v_left, left, 0.9, 0.8)
    assert torch.allclose(a_right[right], a_left[left])


def test_gamma_one_lam_one_is_returns_to_go_minus_values() -> None:
    gen = torch.Generator().manual_seed(3)
    mask = MASKS["holes"]
    r, v = torch.randn(4, 6, generator=gen, dtype=F64), torch.randn(4, 6, generator=gen, dtype=F64)
    adv, ret = gae_advantages(r, v, mask, 1.0, 1.0)
    to_go = torch.zeros_like(r)
    for b in range(4):
        for j in range(6):
            to_go[b, j] = sum(float(r[b, k]) for k in range(j, 6) if mask[b, k]) if mask[b, j] else 0.0
    assert torch.allclose(adv, (to_go - v) * mask) and torch.allclose(ret, to_go)


def test_lam_zero_is_the_one_step_td_error() -> None:
    gen = torch.Generator().manual_seed(4)
    mask = MASKS["left"]
    r, v = torch.randn(4, 6, generator=gen, dtype=F64), torch.randn(4, 6, generator=gen, dtype=F64)
    adv, _ = gae_advantages(r, v, mask, 0.9, 0.0)
    td = torch.zeros_like(r)
    for b in range(4):
        idx = [j for j in range(6) if mask[b, j]]
        for k, j in enumerate(idx):
            nxt = float(v[b, idx[k + 1]]) if k + 1 < len(idx) else 0.0
            td[b, j] = r[b, j] + 0.9 * nxt - v[b, j]
    assert torch.allclose(adv, td)


def test_gae_hand_case() -> None:
    # one row, outcome 1 on the last of three tokens, V = 0.5 everywhere, gamma 0.5, lam 0.5:
    # deltas: 0 + 0.25 - 0.5 = -0.25, -0.25, 1 - 0.5 = 0.5
    # A_2 = 0.5; A_1 = -0.25 + 0.25 * 0.5 = -0.125; A_0 = -0.25 + 0.25 * -0.125 = -0.28125
    adv, ret = gae_advantages(t([[0.0, 0.0, 1.0, 0.0]]), t([[0.5, 0.5, 0.5, 7.0]]), t([[1, 1, 1, 0]]), 0.5, 0.5)
    assert torch.allclose(adv, t([[-0.28125, -0.125, 0.5, 0.0]]))
    assert torch.allclose(ret, t([[0.21875, 0.375, 1.0, 0.0]]))


def test_registered_estimator_puts_the_outcome_on_the_last_token() -> None:
    mask = MASKS["left"]
    gen = torch.Generator().manual_seed(6)
    v = torch.randn(4, 6, generator=gen, dtype=F64)
    kl = torch.randn(4, 6, generator=gen, dtype=F64)
    rewards = t([1.0, -2.0, 0.5, 3.0])
    token = torch.zeros(4, 6, dtype=F64)
    token[:, -1] = rewards  # left padding: every non-empty row ends at the last column
    fn = ADVANTAGE_ESTIMATORS.get("gae")
    got = fn(rewards, None, mask, values=v, token_rewards=kl, gamma=0.9, lam=0.7, whiten=False)
    want, _ = gae_advantages(token + kl, v, mask, 0.9, 0.7)
    assert torch.allclose(got, want)
    assert torch.allclose(fn(rewards, None, mask, values=v), gae_advantages(token, v, mask, whiten=True)[0])
    with pytest.raises(TypeError, match="values"):
        fn(rewards, None, mask)  # a trainer without a critic cannot use GAE


def test_gae_rejects_bad_shapes_and_coefficients() -> None:
    mask = MASKS["right"]
    with pytest.raises(ValueError, match="values"):
        gae_advantages(torch.zeros(4, 6), torch.zeros(4, 5), mask)
    with pytest.raises(ValueError, match="lam"):
        gae_advantages(torch.zeros(4, 6), torch.zeros(4, 6), mask, 0.9, 1.5)


def loop_value_loss(v: torch.Tensor, old: torch.Tensor, ret: torch.Tensor, mask: torch.Tensor, c: float) -> float:
    terms = []
    for b in range(mask.shape[0]):
        for j in range(mask.shape[1]):
            if mask[b, j]:
                vb, ob, rb = float(v[b, j]), float(old[b, j]), float(ret[b, j])
                clipped = ob + min(max(vb - ob, -c), c)
                terms.append(0.5 * max((vb - rb) ** 2, (clipped - rb) ** 2))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("layout", sorted(MASKS))
def test_clipped_value_loss_matches_a_python_loop(layout: str) -> None:
    gen = torch.Generator().manual_seed(7)
    mask = MASKS[layout]
    old = torch.randn(4, 6, generator=gen, dtype=F64)
    v = garbage(old + 0.5 * torch.randn(4, 6, generator=gen, dtype=F64), mask)
    ret = garbage(torch.randn(4, 6, generator=gen, dtype=F64), mask)
    got = clipped_value_loss(v, garbage(old, mask), ret, mask, 0.2)
    assert math.isclose(float(got), loop_value_loss(v, old, ret, mask, 0.2), rel_tol=1e-12)


def test_the_clip_binds_and_gradients_follow_the_chosen_branch() -> None:
    mask = torch.tensor([[1, 1, 1, 0]]).bool()
    old = t([[0.0, 0.0, 0.0, 0.0]])
    ret = t([[1.0, 1.0, 0.1, 0.0]])
    # clip 0.2 around old = 0, halved squared errors unclipped vs clipped:
    # token 0: V = 2, R = 1: clipped V = 0.2; 0.5 * 1^2 = 0.5 > 0.5 * 0.8^2 = 0.32: unclipped wins, grad (V - R) / 3;
    # token 1: V = 0.5, R = 1: clipped V = 0.2; 0.5 * 0.5^2 = 0.125 < 0.32: the clipped branch wins and,
    #          the clip binding, carries no gradient;
    # token 2: V = -0.5, R = 0.1: clipped V = -0.2; 0.5 * 0.6^2 = 0.18 > 0.5 * 0.3^2: unclipped, grad -0.6 / 3.
    values = t([[2.0, 0.5, -0.5, math.nan]]).requires_grad_(True)
    loss = clipped_value_loss(values, old, ret, mask, 0.2)
    want = (0.5 + 0.32 + 0.18) / 3
    assert math.isclose(loss.item(), want, rel_tol=1e-12)
    unclipped = 0.5 * (values.detach() - ret)[mask].square().mean()
    assert loss.item() > float(unclipped)  # the clip binds: the loss differs from the plain squared error
    loss.backward()
    assert values.grad is not None and torch.allclose(values.grad, t([[1 / 3, 0.0, -0.6 / 3, 0.0]]))


def test_inside_the_clip_the_value_loss_is_half_the_squared_error_with_its_gradient() -> None:
    mask = torch.tensor([[1, 1], [1, 0]]).bool()
    old = t([[0.0, 1.0], [2.0, 0.0]])
    values = (old + t([[0.05, -0.1], [0.15, 0.0]])).requires_grad_(True)
    ret = t([[1.0, -1.0], [0.0, 5.0]])
    loss = clipped_value_loss(values, old, ret, mask, 0.2)
    err = (values.detach() - ret) * mask
    assert math.isclose(loss.item(), float(0.5 * err.square().sum() / 3), rel_tol=1e-12)
    loss.backward()
    assert values.grad is not None and torch.allclose(values.grad, err / 3)
