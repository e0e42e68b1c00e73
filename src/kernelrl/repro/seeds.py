"""The seed loop every multi-seed reproduction shares: one run per seed, each written to the record as it ends."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kernelrl.evaluate import EvalPool
from kernelrl.repro.record import write_record
from kernelrl.train.config import TrainConfig
from kernelrl.train.job import eval_config

Say = Callable[[str], None]
SeedRun = Callable[[TrainConfig, Path, EvalPool, Say], dict[str, Any]]


def run_seeds(name: str, cfg: TrainConfig, seeds: Iterable[int], out: Path, results: dict[str, Any], run_seed: SeedRun,
              *, pool: EvalPool | None = None, echo: bool = True, started: float | None = None) -> None:
    """`run_seed(cfg with that seed, out / "seed<N>", pool, say)` for each seed, one after another: its numbers go
    to ``results["seeds"][str(seed)]``, its wall time to ``results["times"]["seed<N>_s"]``, and ``results.json``
    is rewritten after each (a stopped run keeps the seeds it finished). `pool`: shared by every seed; made from
    ``cfg.eval`` (and closed at the end) when None. `say` prints ``[repro NAME <s>s] seed N: ...`` when `echo`,
    timed from `started` (default: now)."""
    t_start = time.perf_counter() if started is None else started
    own = pool is None
    shared = pool or EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox)
    try:
        for seed in seeds:
            seeded = cfg.model_copy(deep=True)
            seeded.seed = seed

            def say(msg: str, seed: int = seed) -> None:
                if echo:
                    print(f"[repro {name} {time.perf_counter() - t_start:6.0f}s] seed {seed}: {msg}", flush=True)

            t0 = time.perf_counter()
            results["seeds"][str(seed)] = run_seed(seeded, out / f"seed{seed}", shared, say)
            results["times"][f"seed{seed}_s"] = time.perf_counter() - t0
            write_record(out, results)  # the seeds so far
    finally:
        if own:
            shared.close()
