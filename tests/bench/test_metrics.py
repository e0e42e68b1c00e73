"""Metric functions against hand-computed values."""

from __future__ import annotations

import math

import pytest

from kernelrl.agent import Trajectory, Turn
from kernelrl.bench import fast_p, geomean, pass_at_k, summarize
from kernelrl.bench.metrics import Outcome
from kernelrl.evaluate.result import EvalResult, Status, Timing


def test_pass_at_k_hand_computed() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c / n
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))  # 1 - 21/252
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0  # n - c < k: every draw of 4 contains the correct one
    assert pass_at_k(3, 3, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def test_geomean() -> None:
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([2.0, 0.5, 8.0]) == pytest.approx(2.0)
    assert geomean([]) is None


def test_fast_p_conventions_differ_exactly_at_the_threshold() -> None:
    by_task = {
        "a": [Outcome(True, 1.0), Outcome(False), Outcome(True, 2.0), Outcome(True, None)],  # untimed correct
        "b": [Outcome(True, 0.5), Outcome(True, 1.5)],
    }
    # strict (> p): a -> {2.0} = 1/4, b -> {1.5} = 1/2; at least (>= p): a -> {1.0, 2.0} = 2/4, b -> 1/2
    assert fast_p(by_task, 1.0, "strict") == pytest.approx((1 / 4 + 1 / 2) / 2)
    assert fast_p(by_task, 1.0, "at_least") == pytest.approx((2 / 4 + 1 / 2) / 2)
    # p = 0: every correct sample, timed or not, in both conventions: a 3/4, b 2/2
    assert fast_p(by_task, 0.0, "strict") == fast_p(by_task, 0.0, "at_least") == pytest.approx((3 / 4 + 1) / 2)
    assert fast_p(by_task, 2.0, "strict") == 0.0 and fast_p(by_task, 2.0, "at_least") == pytest.approx(1 / 8)
    assert fast_p({}, 1.0, "strict") is None
    with pytest.raises(ValueError):
        fast_p(by_task, 1.0, "loose")


def turn(index: int, status: str, speedup: float | None = None, compiled: float | None = None) -> Turn:
    timing = None if speedup is None else Timing(speedup=speedup, speedup_vs_compiled=compiled)
    result = EvalResult(Status(status), "t", "cpu", timing=timing)
    return Turn(index=index, messages=[], response="", code="x", result=result, reward=0.0)


def test_summary_per_turn_best_so_far_per_level_and_compiled_baseline() -> None:
    trajs = [
        Trajectory("t1", "cpu", 0, 1, turns=[turn(0, "incorrect"), turn(1, "ok", 2.0, 0.5)]),
        Trajectory("t1", "cpu", 1, 1, turns=[turn(0, "ok", 4.0, 1.0), turn(1, "ok", 1.0, 0.25)]),
        Trajectory("t2", "cpu", 0, 2, turns=[turn(0, "compile_error")], stop_reason="max_turns"),
        Trajectory("t2", "cpu", 1, 2, turns=[turn(0, "ok", 0.5, None)], stop_reason="target_reached"),
    ]
    s = summarize(trajs)
    o = s["overall"]
    assert s["ks"] == [1, 2] and o["tasks"] == 2 and o["samples"] == 4
    # best over turns: t1 samples 2.0 and 4.0 (correct), t2: one correct of two
    assert o["correct_rate"] == pytest.approx(3 / 4)
    assert o["pass_at_k"]["1"] == pytest.approx((1 + 0.5) / 2) and o["pass_at_k"]["2"] == pytest.approx(1.0)
    assert o["geomean_speedup"] == pytest.approx((2.0 * 4.0 * 0.5) ** (1 / 3))
    assert o["fast_p"]["strict"]["1"] == pytest.approx((1 + 0) / 2)
    # vs torch.compile (best per sample): 0.5, 1.0, none -> strict > 1: 0; at least >= 1: t1 1/2
    assert o["fast_p_compiled"]["strict"]["1"] == 0.0
    assert o["fast_p_compiled"]["at_least"]["1"] == pytest.approx((1 / 2 + 0) / 2)
    assert o["geomean_speedup_compiled"] == pytest.approx(math.sqrt(0.5 * 1.0))
    # turn 1: t1 one correct (4.0) of two, t2 one of two; turn 2 carries forward the stopped episodes
    t1, t2 = s["by_turn"]
    assert t1["correct_rate"] == pytest.approx(2 / 4) and t2["correct_rate"] == pytest.approx(3 / 4)
    assert t1["geomean_speedup"] == pytest.approx(math.sqrt(4.0 * 0.5))
    # that turn's own result: turn 2 of t1 sample 1 (1.0x) replaces its turn-1 4.0x; t2 carries turn 1 forward
    own2 = s["at_turn"][1]
    assert own2["correct_rate"] == pytest.approx(3 / 4)
    assert own2["geomean_speedup"] == pytest.approx((2.0 * 1.0 * 0.5) ** (1 / 3))
    assert s["at_turn"][0]["correct_rate"] == t1["correct_rate"]
    assert set(s["by_level"]) == {"1", "2"}
    assert s["by_level"]["1"]["correct_rate"] == 1.0 and s["by_level"]["2"]["correct_rate"] == 0.5
    assert s["stop_reasons"] == {"": 2, "max_turns": 1, "target_reached": 1}


def test_compiled_metrics_are_absent_when_not_measured() -> None:
    s = summarize([Trajectory("t", "cpu", 0, 1, turns=[turn(0, "ok", 2.0)])])
    assert s["overall"]["fast_p_compiled"] is None and s["overall"]["geomean_speedup_compiled"] is None
    assert s["overall"]["fast_p"]["strict"]["1.5"] == 1.0 and s["overall"]["fast_p"]["strict"]["3"] == 0.0
