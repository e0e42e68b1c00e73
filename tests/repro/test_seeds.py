"""The shared seed loop: each seed's numbers and time are on disk as soon as it ends, a failing seed keeps the
earlier ones, and every seed gets its own seeded config and directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernelrl.evaluate import EvalPool
from kernelrl.repro.record import read_record
from kernelrl.repro.seeds import run_seeds
from kernelrl.train.config import load_config
from kernelrl.train.job import eval_config


def test_each_seed_is_recorded_as_it_ends_and_a_failure_keeps_the_earlier_ones(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config("smoke")
    results: dict[str, Any] = {"repro": "test", "seeds": {}, "times": {}}
    seen: list[tuple[int, Path]] = []

    def run_seed(seeded: Any, out: Path, pool: EvalPool, say: Any) -> dict[str, Any]:
        seen.append((seeded.seed, out))
        if seeded.seed == 7:
            assert read_record(tmp_path)["seeds"] == {"3": {"value": 3}}  # seed 3 was written before seed 7 ran
            raise RuntimeError("seed 7 failed")
        say("ran")
        return {"value": seeded.seed}

    with EvalPool(1, eval_config(cfg), sandbox="none") as pool, pytest.raises(RuntimeError, match="seed 7 failed"):
        run_seeds("test", cfg, (3, 7, 9), tmp_path, results, run_seed, pool=pool)
    assert seen == [(3, tmp_path / "seed3"), (7, tmp_path / "seed7")] and cfg.seed == load_config("smoke").seed
    assert read_record(tmp_path)["seeds"] == {"3": {"value": 3}} and set(results["times"]) == {"seed3_s"}
    printed = capsys.readouterr().out
    assert printed.startswith("[repro test ") and "s] seed 3: ran" in printed
