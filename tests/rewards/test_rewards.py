"""Hand-computed cases for the kernel rewards and profiling-based rejection sampling."""

from __future__ import annotations

import math
import random

import pytest

from kernelrl.evaluate.result import EvalResult, Status, Timing
from kernelrl.rewards import (
    REWARDS,
    autotriton_reward,
    coverage,
    coverage_reward,
    get_reward,
    milestone_reward,
    prs_keep_mask,
    prs_keep_probability,
    speedup_reward,
    weighted_reward,
)


def res(status: Status = Status.OK, speedup: float | None = 2.0, calls: int = 5, notes: list[str] | None = None,
        **kw: object) -> EvalResult:
    timing = Timing(speedup=speedup) if speedup is not None else None
    return EvalResult(status=status, task_id="t", backend="cpu", timing=timing,
                      kernel_calls={"k": calls} if calls else {}, notes=notes or [], **kw)  # type: ignore[arg-type]


def test_registry_names() -> None:
    assert {"weighted", "speedup", "coverage", "milestone", "autotriton", "binary"} <= set(REWARDS.names())
    assert get_reward("weighted", correct_weight=0.5)(res(speedup=0.5)) == 0.5


def test_weighted() -> None:
    assert weighted_reward(res(speedup=2.0)) == pytest.approx(1.0)
    assert weighted_reward(res(speedup=0.9)) == pytest.approx(0.3)
    assert weighted_reward(res(speedup=1.0)) == pytest.approx(0.3)  # strictly faster
    assert weighted_reward(res(Status.INCORRECT)) == 0.0


def test_speedup_capped_log() -> None:
    assert speedup_reward(res(speedup=4.0)) == pytest.approx(3.0)  # 1 + log2 4
    assert speedup_reward(res(speedup=64.0)) == pytest.approx(4.0)  # 1 + cap 3
    assert speedup_reward(res(speedup=0.5)) == pytest.approx(0.1)  # 1 + (-1), floored: correct beats wrong
    assert speedup_reward(res(speedup=0.25)) == pytest.approx(0.1)  # floored
    assert speedup_reward(res(speedup=0.25), correct_floor=0.0) == 0.0
    assert speedup_reward(res(speedup=0.7)) == pytest.approx(1 + math.log2(0.7))  # above the floor: unchanged
    assert speedup_reward(res(speedup=None)) == 1.0
    assert speedup_reward(res(Status.COMPILE_ERROR)) == 0.0


def test_coverage_from_eval_result() -> None:
    assert coverage(res(calls=6)) == 1.0
    assert coverage(res(calls=0)) == 0.0
    ops = {"aten.add.Tensor": 2, "aten.mul.Tensor": 4}
    assert coverage(res(calls=2, torch_ops=ops)) == pytest.approx(2 / 8)
    assert coverage(res(calls=2, torch_ops={"aten.add.Tensor": -5})) == 1.0  # a forged negative count earns nothing
    note = "torch compute ops in forward: aten.add.Tensorx2, aten.mul.Tensorx4"
    assert coverage(res(calls=2, notes=[note])) == 1.0  # the note is feedback; the counts are the field
    assert coverage(res(calls=2, environment={"coverage": 0.7})) == 0.7


def test_torch_ops_round_trip_and_legacy_results_keep_their_counts() -> None:
    ops = {"aten.add.Tensor": 2, "aten.mul.Tensor": 4}
    assert EvalResult.from_dict(res(calls=2, torch_ops=ops).to_dict()).torch_ops == ops
    old = res(calls=2, notes=["torch compute ops in forward: aten.add.Tensorx2, aten.mul.Tensorx4"]).to_dict()
    del old["torch_ops"]  # a result recorded before the field: its counts are read from the judge's note once
    loaded = EvalResult.from_dict(old)
    assert loaded.torch_ops == ops and coverage(loaded) == pytest.approx(2 / 8)


def test_coverage_reward() -> None:
    # 1 + min(2, 3) + 1.0 * coverage 1.0
    assert coverage_reward(res(speedup=2.0)) == pytest.approx(4.0)
    assert coverage_reward(res(speedup=10.0)) == pytest.approx(5.0)
    assert coverage_reward(res(speedup=1.0, calls=1, torch_ops={"aten.mul": 3})) == pytest.approx(2.25)
    assert coverage_reward(res(Status.INCORRECT)) == 0.0


def test_milestones() -> None:
    assert milestone_reward(res(Status.COMPILE_ERROR)) == 0.0
    assert milestone_reward(res(Status.INCORRECT)) == pytest.approx(0.1)
    assert milestone_reward(res(speedup=0.8)) == pytest.approx(0.6)
    assert milestone_reward(res(speedup=1.6)) == pytest.approx(0.6 + 2 * 0.5)
    assert milestone_reward(res(speedup=5.0)) == pytest.approx(0.6 + 4 * 0.5)


def test_autotriton_rules_veto_execution_reward() -> None:
    assert autotriton_reward(res()) == 1.0
    assert autotriton_reward(res(calls=0)) == 0.0  # never called its own kernel
    torch_ops = {"aten.relu": 1}
    assert autotriton_reward(res(torch_ops=torch_ops)) == 0.5  # a soft rule: penalised, not vetoed
    assert autotriton_reward(res(torch_ops=torch_ops), soft_penalty=1.0) == 0.0  # the old veto
    assert autotriton_reward(res(static_findings=[{"id": "x"}]), rule_weight=0.5) == 0.5
    assert autotriton_reward(res(speedup=4.0), execution="speedup") == pytest.approx(3.0)
    assert autotriton_reward(res(Status.REJECTED)) == 0.0


def test_prs_probability() -> None:
    def cov(c: float) -> EvalResult:
        return res(environment={"coverage": c})

    assert prs_keep_probability(cov(0.3)) == 0.0
    assert prs_keep_probability(cov(0.35)) == pytest.approx(0.5)
    assert prs_keep_probability(cov(0.9)) == 1.0
    assert prs_keep_probability(res(Status.INCORRECT, calls=0)) == 1.0  # incorrect turns are kept


def test_prs_modes() -> None:
    lo, mid, hi = (res(environment={"coverage": c}) for c in (0.2, 0.35, 1.0))
    bad = res(Status.INCORRECT)
    per_turn = prs_keep_mask([[hi, bad, lo]], mode="per_turn")
    assert per_turn == [[True, True, False]]
    assert prs_keep_mask([[bad, None]], mode="per_turn") == [[True, True]]  # no verdict: kept like incorrect
    # frequencies follow p for the per-turn mode
    kept = sum(row[0] for row in prs_keep_mask([[mid]] * 4000, rng=random.Random(1)))
    assert 1800 < kept < 2200
    with pytest.raises(ValueError):
        prs_keep_mask([[hi]], mode="nope")


def test_prs_geometric_ramps_the_geometric_mean_coverage() -> None:
    # Issue 16: p = ramp(g) with g the geometric mean of the correct turns' coverages, not the
    # geometric mean of per-turn probabilities. Coverages 0.35 and 0.45: g = sqrt(0.1575) = 0.39686,
    # p = (0.39686 - 0.3) / 0.1 = 0.9686 (the old rule gave sqrt(0.5 * 1.0) = 0.707).
    a, b = (res(environment={"coverage": c}) for c in (0.35, 0.45))
    p = (math.sqrt(0.35 * 0.45) - 0.3) / 0.1
    assert p == pytest.approx(0.96863, abs=1e-5)
    draw = random.Random(0).random()  # 0.844: kept under p = 0.969, dropped under 0.707
    assert math.sqrt(0.5) < draw < p
    assert prs_keep_mask([[a, b]], mode="geometric", rng=random.Random(0)) == [[True, True]]
    kept = sum(row[0] for row in prs_keep_mask([[a, b]] * 4000, mode="geometric", rng=random.Random(1)))
    assert 3820 < kept < 3930  # 4000 p = 3874.5, sd 11
    # one draw per trajectory: its correct turns are kept or dropped together
    rows = prs_keep_mask([[a, b]] * 200, mode="geometric", rng=random.Random(2))
    assert all(r[0] == r[1] for r in rows)
    # the mean, not the minimum, decides: 0.2 and 1.0 -> g = 0.447 -> always kept
    lo, hi = (res(environment={"coverage": c}) for c in (0.2, 1.0))
    assert prs_keep_mask([[lo, hi]], mode="geometric") == [[True, True]]
    zero = res(environment={"coverage": 0.0})
    assert prs_keep_mask([[zero, hi]], mode="geometric") == [[False, False]]


def test_prs_geometric_keeps_incorrect_turns() -> None:
    # Issue 16: incorrect turns carry the negative signal and are always kept (KernelGYM), also when
    # the trajectory's correct turns are dropped; their coverage does not enter the mean.
    lo = res(environment={"coverage": 0.2})
    bad = res(Status.INCORRECT, calls=0)  # coverage 0, but incorrect: ignored by PRS
    hi = res(environment={"coverage": 0.9})
    assert prs_keep_mask([[lo, bad]], mode="geometric") == [[False, True]]
    assert prs_keep_mask([[bad, hi]], mode="geometric") == [[True, True]]
    assert prs_keep_mask([[bad, None], [bad]], mode="geometric") == [[True, True], [True]]


def test_autotriton_hybrid_mode_penalises_soft_rules() -> None:
    """Hybrid mode (torch_ops=allow): torch compute in forward and low coverage are recorded, not rejected;
    the rule reward ranks full kernel > kernel with some torch > lazy kernel > wrong kernel, all on one scale."""
    full = res(speedup=2.0, coverage={"fraction": 0.95})
    some = res(speedup=2.0, torch_ops={"aten.add": 2}, coverage={"fraction": 0.7})
    lazy = res(speedup=2.0, torch_ops={"aten.mul": 2, "aten.add": 2}, coverage={"fraction": 0.1})
    wrong = res(Status.INCORRECT)
    r = [autotriton_reward(x, execution="speedup") for x in (full, some, lazy, wrong)]
    assert r == pytest.approx([2.0, 1.0, 0.0, 0.0])
    r = [autotriton_reward(x, execution="speedup", soft_penalty=0.25) for x in (full, some, lazy, wrong)]
    assert r == pytest.approx([2.0, 1.5, 1.0, 0.0])
    assert autotriton_reward(lazy, soft_penalty=0.25) == 0.5  # binary execution reward: 1 * (1 - 2 * 0.25)
    assert autotriton_reward(res(Status.REJECTED, coverage={"fraction": 0.1})) == 0.0  # hard rules still veto


def test_speedup_vs_compile_reward() -> None:
    """CUDA Agent's baseline: speedup over torch.compile(reference) (EvalConfig.compile_baseline)."""
    assert "speedup_vs_compile" in REWARDS.names()

    def timed(eager_ms: float, compiled_ms: float | None, cand_ms: float, status: Status = Status.OK) -> EvalResult:
        t = Timing(candidate_ms=cand_ms, reference_ms=eager_ms, compiled_reference_ms=compiled_ms,
                   speedup=eager_ms / cand_ms)
        return EvalResult(status=status, task_id="t", backend="cpu", timing=t, kernel_calls={"k": 1})

    fn = get_reward("speedup_vs_compile")
    # 4x faster than eager but only 2x faster than compiled: 1 + log2(2), where the eager reward gives 1 + log2(4)
    assert fn(timed(4.0, 2.0, 1.0)) == pytest.approx(2.0)
    assert speedup_reward(timed(4.0, 2.0, 1.0)) == pytest.approx(3.0)
    assert fn(timed(4.0, 0.5, 1.0)) == pytest.approx(0.1)  # 2x slower than compiled: 1 - 1, floored at 0.1
    assert fn(timed(4.0, 2.0, 1.0, Status.INCORRECT)) == 0.0
    assert fn(timed(4.0, None, 1.0)) == pytest.approx(3.0)  # no compiled timing: eager fallback
    assert get_reward("speedup_vs_compile", fallback="none")(timed(4.0, None, 1.0)) == 1.0
    stepped = get_reward("speedup_vs_compile", mode="stepped")
    assert [stepped(timed(4.0, c, 1.0)) for c in (2.0, 0.5)] == [3.0, 2.0]
    assert stepped(timed(0.9, 0.5, 1.0)) == 1.0
