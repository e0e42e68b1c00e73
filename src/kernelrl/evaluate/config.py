"""`EvalConfig`: every knob of one evaluation, validated (`kernelrl.config_system`), JSON-serialisable."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field

from kernelrl.config_system import ConfigModel


def default_workers() -> int:
    """One worker per core on CPU, one per GPU where there are GPUs."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device_count()
    except Exception:
        pass
    return max(1, len(os.sched_getaffinity(0)))


COMPILE_TIMEOUT_S = 600.0  # the torch.compile baseline's correctness stage, which runs Inductor's compile


class StageTimeouts(ConfigModel):
    """Wall-clock limits per stage, in seconds."""

    build: float = Field(180.0, gt=0)  # includes compiler runs (a torch extension build takes ~1 min)
    init: float = Field(30.0, gt=0)
    correctness: float = Field(60.0, gt=0)
    timing: float = Field(120.0, gt=0)


class EvalConfig(ConfigModel):
    correctness_trials: int = Field(5, ge=1)
    warmup: int = Field(3, ge=0)
    timing_trials: int = Field(20, ge=1)
    timing_budget_s: float = Field(2.0, gt=0)  # per model: fewer trials when one call is slow (at least 5)
    measure_timing: bool = True
    compile_baseline: bool = False  # also time torch.compile(reference)
    cache_reference_timing: bool = True  # reuse a worker's reference timing for the same task and settings
    rtol: float | None = Field(None, ge=0)  # override the task's tolerance
    atol: float | None = Field(None, ge=0)
    seed: int = 0
    num_threads: int = Field(1, ge=1)  # CPU threads for torch and OpenMP in the evaluated process
    memory_limit_mb: int = Field(8192, ge=1)  # address-space limit of the evaluated process
    output_limit_mb: int = Field(64, ge=1)  # largest file (including captured stdout/stderr) the candidate may write
    device_index: int | None = Field(None, ge=0)  # GPU to use; None: the worker's own
    # Anti-hacking policy.
    guards: bool = True  # runtime checks: kernel really ran, torch ops, aliasing, mutation, caching, roofline
    torch_ops: Literal["reject", "warn", "allow"] = "reject"  # torch compute ops in the candidate's forward
    static_severity: dict[str, Literal["reject", "warn"]] = Field(default_factory=dict)  # check id (or "*") -> level
    timing_input_sets: int = Field(3, ge=1)  # timed calls draw their inputs at random from this many sets (outputs known)
    # With torch_ops=reject: least share of compute time in the candidate's own code (an honest tiny kernel
    # spends a fair share allocating its output in libtorch; hidden torch or numpy compute scores ~0).
    min_coverage: float = Field(0.25, ge=0, le=1)
    suspicious_speedup: float = Field(5.0, gt=0)  # above this, timing is re-measured and checked against the roofline
    roofline_slack: float = Field(2.0, gt=0)  # reject when faster than roofline / slack
    timeouts: StageTimeouts = Field(default_factory=StageTimeouts)

