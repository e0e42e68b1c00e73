"""`kernelrl.repro.stats`: the t quantiles, the paired interval and the three verdicts on hand-made differences."""

from __future__ import annotations

import math

import pytest

from kernelrl.repro.stats import paired, seeds_needed, t975, verdict_line


def test_t975_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 29, 30, 31, 45, 100, 1000):
        assert t975(df) == pytest.approx(stats.t.ppf(0.975, df), rel=2e-4), df


def test_paired_interval_and_verdicts() -> None:
    up = paired([0.10, 0.12, 0.08])
    half = 4.303 * 0.02 / math.sqrt(3)
    assert up["verdict"] == "reproduced" and up["ci95"] == pytest.approx([0.10 - half, 0.10 + half])
    assert paired([-0.10, -0.12, -0.08])["verdict"] == "not reproduced"
    mixed = paired([0.05, -0.02, 0.03])
    assert mixed["verdict"] == "underpowered" and mixed["ci95"][0] < 0 < mixed["ci95"][1]
    n = mixed["seeds_needed"]  # at the observed mean and sd, n seeds give an interval that excludes 0
    assert n is not None and n > 3
    assert t975(n - 1) * mixed["sd"] / math.sqrt(n) < mixed["mean"] <= t975(n - 2) * mixed["sd"] / math.sqrt(n - 1)
    assert "seeds" in verdict_line("B beats A", mixed) and "underpowered" in verdict_line("B beats A", mixed)


def test_paired_edge_cases() -> None:
    one = paired([0.2])
    assert one["verdict"] == "underpowered" and one["ci95"] is None and one["seeds_needed"] is None
    none = paired([0.0, 0.0, 0.0])  # no difference at all: no number of seeds helps
    assert none["verdict"] == "underpowered" and none["seeds_needed"] is None and "no difference" in none["why"]
    assert paired([0.1, 0.1])["verdict"] == "reproduced"  # sd 0: the interval is the point
    assert seeds_needed(0.1, 0.0) == 2 and seeds_needed(0.0, 1.0) is None
