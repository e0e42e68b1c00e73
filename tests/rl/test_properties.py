"""Property tests (hypothesis): masked garbage and padding never change a result, leave-one-out
advantages sum to zero per group, clip bounds hold."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_helpers import F64, assert_tree_close, pad_columns, scramble_masked

from kernelrl.rl import (
    ADVANTAGE_ESTIMATORS,
    KL_PENALTIES,
    LOSS_AGGREGATIONS,
    MISMATCH_CORRECTIONS,
    clipped_value_loss,
    entropy_bonus,
    gae_advantages,
    geometric_rejection,
    implicit_process_rewards,
    kl_loss,
    normalize_process_rewards,
    opd_token_rewards,
    opd_topk_clipped_loss,
    opd_topk_rewards,
    ppo_clip_loss,
    ppo_clip_token_loss,
    prm_cross_entropy_loss,
    sequence_mis,
    stitched_importance_ratio,
    token_mis,
    token_tis,
)
from kernelrl.rl.masked import masked_whiten, reverse_cumsum

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True)


class Inputs:
    """Random inputs for one example: ``token`` tensors ([B, T] or [B, T, K]) get garbage where the
    mask is false and padded columns; ``other`` are passed unchanged."""

    def __init__(self, seed: int, b: int, t: int) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.b, self.t = b, t
        self.mask = torch.rand(b, t, generator=self.gen) < 0.7

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen, dtype=F64)

    def log_probs(self, *extra: int) -> torch.Tensor:
        return -self.randn(self.b, self.t, *extra).abs() - 0.01

    def groups(self) -> torch.Tensor:
        return torch.randint(0, 3, (self.b,), generator=self.gen)


Case = Callable[[Inputs], tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]]


def _adv(name: str, **extra: Any) -> Case:
    def make(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
        token: dict[str, torch.Tensor] = {}
        other: dict[str, Any] = {"rewards": x.randn(x.b), "group_ids": x.groups(), **extra}
        if name in ("reinforce++", "reinforce++-baseline"):
            token["token_kl"] = x.randn(x.b, x.t).abs()
            other["kl_coef"] = 0.1
        if name == "prime":
            token["process_rewards"] = x.randn(x.b, x.t)
        if name == "opd":
            token["token_rewards"] = x.randn(x.b, x.t)
            other["outcome_coef"] = 0.5
        return ADVANTAGE_ESTIMATORS.get(name), token, other
    return make


def _trloo(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
    turns = torch.randint(1, 4, (x.b,), generator=x.gen)  # x.b episodes of 1-3 turns
    episode = torch.repeat_interleave(torch.arange(x.b), turns)
    start = torch.cumsum(turns, 0) - turns
    turn = torch.arange(int(turns.sum())) - torch.repeat_interleave(start, turns)
    prompt = torch.randint(0, 2, (x.b,), generator=x.gen)[episode]
    perm = torch.randperm(turn.numel(), generator=x.gen)
    n = turn.numel()
    x.mask = torch.rand(n, x.t, generator=x.gen) < 0.7
    other = {"rewards": x.randn(n), "group_ids": prompt[perm], "turn_index": turn[perm],
             "episode_ids": episode[perm] * 7, "counts": torch.rand(n, generator=x.gen) < 0.8, "gamma": 0.9}
    return ADVANTAGE_ESTIMATORS.get("trloo"), {}, other


def _gae(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
    return gae_advantages, {"token_rewards": x.randn(x.b, x.t), "values": x.randn(x.b, x.t)}, {
        "gamma": 0.9, "lam": 0.8, "whiten": True}


def _gae_estimator(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
    token = {"values": x.randn(x.b, x.t), "token_rewards": x.randn(x.b, x.t)}
    return ADVANTAGE_ESTIMATORS.get("gae"), token, {"rewards": x.randn(x.b), "group_ids": x.groups(), "gamma": 0.7}


def _value_loss(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
    old = x.randn(x.b, x.t)
    token = {"values": old + 0.3 * x.randn(x.b, x.t), "old_values": old, "returns": x.randn(x.b, x.t)}
    return clipped_value_loss, token, {"clip_range": 0.2, "agg": "seq-mean-token-mean"}


def _ppo(**kw: Any) -> Case:
    def make(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
        old = x.log_probs()
        token = {"log_prob": old + 0.5 * x.randn(x.b, x.t), "old_log_prob": old, "advantages": x.randn(x.b, x.t),
                 "weights": x.randn(x.b, x.t).abs()}
        return ppo_clip_loss, token, {"clip_high": 0.28, **kw}
    return make


def _pair(fn: Callable[..., Any], a: str, b: str, scale: float = 0.5, **kw: Any) -> Case:
    def make(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
        base = x.log_probs()
        return fn, {a: base + scale * x.randn(x.b, x.t), b: base}, kw
    return make


def _topk_rewards(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
    token = {"student_topk_log_probs": x.log_probs(3), "teacher_topk_log_probs": x.log_probs(3),
             "teacher_ref_topk_log_probs": x.log_probs(3)}
    return opd_topk_rewards, token, {"weighting": "teacher"}


def _topk_loss(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
    old = x.log_probs(3)
    token = {"log_prob_topk": old + 0.3 * x.randn(x.b, x.t, 3), "old_log_prob_topk": old,
             "deltas": x.randn(x.b, x.t, 3), "weights": torch.softmax(x.randn(x.b, x.t, 3), -1)}
    return opd_topk_clipped_loss, token, {"agg": "seq-mean-token-mean"}


def _single(fn: Callable[..., Any], name: str, **kw: Any) -> Case:
    def make(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
        return fn, {name: x.randn(x.b, x.t)}, kw
    return make


def _prm_loss(x: Inputs) -> tuple[Callable[..., Any], dict[str, torch.Tensor], dict[str, Any]]:
    return prm_cross_entropy_loss, {"process_rewards": x.randn(x.b, x.t)}, {
        "labels": (torch.rand(x.b, generator=x.gen) < 0.5).to(F64)}


CASES: dict[str, Case] = {
    **{name: _adv(name) for name in ["grpo", "drgrpo", "rloo", "reinforce++", "reinforce++-baseline", "prime", "opd"]},
    "reinforce++ gamma": _adv("reinforce++", gamma=0.9),
    "prime gamma": _adv("prime", gamma=0.8),
    "trloo": _trloo,
    "gae": _gae,
    "gae estimator": _gae_estimator,
    "value loss": _value_loss,
    **{f"ppo {agg}": _ppo(agg=agg, max_length=16) for agg in LOSS_AGGREGATIONS.names()},
    "ppo dual": _ppo(dual_clip=3.0),
    **{f"kl {k}": _pair(KL_PENALTIES.get(k), "log_prob", "ref_log_prob") for k in ["k1", "k2", "k3"]},
    "kl loss": _pair(kl_loss, "log_prob", "ref_log_prob", kind="k3", agg="seq-mean-token-sum"),
    **{f"mismatch {n}": _pair(MISMATCH_CORRECTIONS.get(n), "train_log_prob", "rollout_log_prob", 0.2)
       for n in ["token_tis", "seq_tis", "token_mis", "seq_mis", "token_veto"]},
    "mismatch geo_rs": _pair(geometric_rejection, "train_log_prob", "rollout_log_prob", 0.05, lower=0.97,
                             upper=1.03),
    "implicit prm": _pair(implicit_process_rewards, "log_prob_prm", "log_prob_ref", beta=0.1),
    "opd token": _pair(opd_token_rewards, "teacher_log_prob", "teacher_ref_log_prob"),
    "copris ratio": _pair(stitched_importance_ratio, "current_log_probs", "behaviour_log_probs", clip=1.5),
    "opd topk rewards": _topk_rewards,
    "opd topk loss": _topk_loss,
    "prm loss": _prm_loss,
    "prm normalise": _single(normalize_process_rewards, "process_rewards"),
    "entropy bonus": _single(entropy_bonus, "entropy", coef=0.01, agg="seq-mean-token-mean"),
    "whiten": _single(masked_whiten, "values"),
    "reverse cumsum": _single(reverse_cumsum, "values", gamma=0.7),
}


def _check_masked_zero(out: Any, mask: torch.Tensor) -> None:
    if isinstance(out, torch.Tensor):
        if out.dim() >= 2 and tuple(out.shape[:2]) == tuple(mask.shape):
            m = mask
            while m.dim() < out.dim():
                m = m.unsqueeze(-1)
            assert torch.all(torch.where(m.expand_as(out), torch.zeros_like(out), out) == 0)
    elif isinstance(out, tuple | list):
        for o in out:
            _check_masked_zero(o, mask)


@pytest.mark.parametrize("case", sorted(CASES))
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 6), t=st.integers(1, 7), pad=st.integers(1, 5))
def test_masked_garbage_and_padding_never_change_a_result(case: str, seed: int, b: int, t: int, pad: int) -> None:
    x = Inputs(seed, b, t)
    fn, token, other = CASES[case](x)
    mask = x.mask
    mask_name = "response_mask" if "response_mask" in inspect.signature(fn).parameters else "mask"
    ref = fn(**token, **other, **{mask_name: mask})
    _check_masked_zero(ref, mask)
    gen = torch.Generator().manual_seed(seed + 1)
    scrambled = {k: scramble_masked(v, mask, gen) for k, v in token.items()}
    before = {k: v.clone() for k, v in scrambled.items()}
    assert_tree_close(ref, fn(**scrambled, **other, **{mask_name: mask}))
    for k, v in scrambled.items():  # inputs are never modified in place
        assert torch.equal(v.isnan(), before[k].isnan()) and torch.equal(v.nan_to_num(), before[k].nan_to_num())
    padded = {k: pad_columns(v, pad, gen) for k, v in scrambled.items()}
    padded_mask = pad_columns(mask, pad, fill=False)
    assert_tree_close(fn(**padded, **other, **{mask_name: padded_mask}), ref, width=mask.shape[1])


def _group_sums(values: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    uniq, inv = torch.unique(keys, return_inverse=True)
    sums = torch.zeros(len(uniq), dtype=values.dtype).index_add_(0, inv, values)
    return sums[inv], torch.bincount(inv)[inv]


@SETTINGS
@given(rewards=st.lists(st.floats(-10, 10), min_size=1, max_size=24), data=st.data())
def test_leave_one_out_advantages_sum_to_zero_per_group(rewards: list[float], data: st.DataObject) -> None:
    r = torch.tensor(rewards, dtype=F64)
    groups = torch.tensor(data.draw(st.lists(st.integers(0, 4), min_size=len(rewards), max_size=len(rewards))))
    mask = torch.ones(len(rewards), 1)
    for adv in (ADVANTAGE_ESTIMATORS.get("rloo")(r, groups, mask)[:, 0],
                ADVANTAGE_ESTIMATORS.get("prime")(r, groups, mask, process_rewards=torch.zeros(len(r), 1),
                                                  whiten=False)[:, 0]):
        sums, sizes = _group_sums(adv, groups)
        assert torch.allclose(sums[sizes > 1], torch.zeros((), dtype=F64), atol=1e-9)
        assert torch.equal(adv[sizes == 1], r[sizes == 1])


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), episodes=st.integers(1, 8))
def test_trloo_sums_to_zero_per_prompt_turn_group(seed: int, episodes: int) -> None:
    x = Inputs(seed, episodes, 2)
    fn, _, other = _trloo(x)
    adv = fn(response_mask=torch.ones(len(other["rewards"]), 1), **other)[:, 0]
    counts = other["counts"]
    key = other["group_ids"] * 10 + other["turn_index"]
    key = torch.where(counts, key, -1 - torch.arange(len(key)))  # non-counting turns: own key each
    sums, sizes = _group_sums(adv, key)
    assert torch.all(adv[~counts] == 0)
    assert torch.allclose(sums[counts & (sizes > 1)], torch.zeros((), dtype=F64), atol=1e-9)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), clip_low=st.floats(0.01, 0.5), clip_high=st.floats(0.01, 0.5),
       dual=st.floats(1.5, 5.0))
def test_ppo_clip_bounds_hold(seed: int, clip_low: float, clip_high: float, dual: float) -> None:
    gen = torch.Generator().manual_seed(seed)
    log_ratio = (torch.randn(64, generator=gen, dtype=F64) * 1.5).requires_grad_(True)
    adv = torch.randn(64, generator=gen, dtype=F64)
    loss, clipped, dual_mask = ppo_clip_token_loss(log_ratio.exp(), adv, clip_low=clip_low, clip_high=clip_high,
                                                   dual_clip=dual)
    pos, neg = adv > 0, adv < 0
    tol = 1e-12
    assert torch.all(loss[pos] >= -adv[pos] * (1 + clip_high) - tol)  # gain capped at (1 + clip_high) A
    assert torch.all(loss[neg] >= -adv[neg] * (1 - clip_low) - tol)
    assert torch.all(loss[neg] <= -dual * adv[neg] + tol)  # dual clip bounds the loss for A < 0
    loss.sum().backward()
    assert torch.all(log_ratio.grad[clipped | dual_mask] == 0)
    assert torch.all(log_ratio.grad[~(clipped | dual_mask)] != 0) or bool((adv == 0).any())


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), upper=st.floats(1.01, 3.0), lower=st.floats(0.05, 0.99))
def test_mismatch_bounds_hold(seed: int, upper: float, lower: float) -> None:
    x = Inputs(seed, 6, 5)
    rollout = x.log_probs()
    train = rollout + 0.7 * x.randn(6, 5)
    mask = x.mask
    ratio = torch.exp(train - rollout)
    tis = token_tis(train, rollout, mask, upper=upper)
    assert torch.all(tis.weights <= upper + 1e-12)
    assert torch.allclose(tis.weights[mask], torch.minimum(ratio, torch.tensor(upper, dtype=F64))[mask])
    mis = token_mis(train, rollout, mask, upper=upper, lower=lower)
    kept = ratio[mis.mask]
    assert torch.all((kept <= upper + 1e-12) & (kept >= lower - 1e-12))
    assert torch.all(mis.mask == (mask & (ratio <= upper) & (ratio >= lower)))
    seq = sequence_mis(train, rollout, mask, upper=upper, lower=lower)
    prod = torch.exp(torch.where(mask, train - rollout, torch.zeros(()).to(F64)).sum(-1))
    rows = seq.mask.any(-1)
    assert torch.all((prod[rows] <= upper + 1e-9) & (prod[rows] >= lower - 1e-9))
    geo = geometric_rejection(train, rollout, mask, lower=lower, upper=upper)
    n = mask.sum(-1).clamp_min(1)
    g = torch.exp(torch.where(mask, train - rollout, torch.zeros(()).to(F64)).sum(-1) / n)
    assert torch.equal(geo.mask.any(-1), ((g >= lower) & (g <= upper)) & mask.any(-1))


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), clip=st.floats(1.0, 3.0))
def test_copris_ratio_clip_bound(seed: int, clip: float) -> None:
    x = Inputs(seed, 5, 6)
    behaviour = x.log_probs()
    out = stitched_importance_ratio(behaviour + x.randn(5, 6), behaviour, x.mask, clip=clip)
    assert torch.all(out.ratio <= clip + 1e-12) and torch.all(out.ratio >= 0)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), weighting=st.sampled_from(["student", "teacher", "unweighted"]))
def test_opd_topk_weights_are_a_distribution(seed: int, weighting: str) -> None:
    x = Inputs(seed, 4, 5)
    out = opd_topk_rewards(x.log_probs(4), x.log_probs(4), x.log_probs(4), x.mask, weighting=weighting)
    sums = out.weights.sum(-1)
    assert torch.allclose(sums[x.mask], torch.ones(()).to(F64))
    lo, hi = out.deltas.min(-1).values, out.deltas.max(-1).values
    assert torch.all((out.rewards >= lo - 1e-12) & (out.rewards <= hi + 1e-12))


def test_float32_whitening_is_accurate_on_a_large_batch() -> None:
    # 1M valid-ish float32 tokens: the variance must not lose digits to a long float32 accumulation
    from kernelrl.rl.masked import masked_whiten

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 1024, generator=gen) * 3 + 1
    mask = torch.rand(1024, 1024, generator=gen) < 0.6
    err = (masked_whiten(x, mask).double() - masked_whiten(x.double(), mask)).abs().max().item()
    assert err < 2e-6
