"""`EvalConfig`: every knob of one evaluation, validated, JSON-serialisable."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any


def default_workers() -> int:
    """One worker per core on CPU, one per GPU where there are GPUs."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device_count()
    except Exception:
        pass
    return max(1, len(os.sched_getaffinity(0)))


@dataclass
class StageTimeouts:
    """Wall-clock limits per stage, in seconds."""

    build: float = 180.0  # includes compiler runs (a torch extension build takes ~1 min)
    init: float = 30.0
    correctness: float = 60.0
    timing: float = 120.0


@dataclass
class EvalConfig:
    correctness_trials: int = 5
    warmup: int = 3
    timing_trials: int = 20
    timing_budget_s: float = 2.0  # per model: fewer trials when one call is slow (at least 5)
    measure_timing: bool = True
    compile_baseline: bool = False  # also time torch.compile(reference)
    cache_reference_timing: bool = True  # reuse a worker's reference timing for the same task and settings
    rtol: float | None = None  # override the task's tolerance
    atol: float | None = None
    seed: int = 0
    num_threads: int = 1  # CPU threads for torch and OpenMP in the evaluated process
    memory_limit_mb: int = 8192  # address-space limit of the evaluated process
    output_limit_mb: int = 64  # largest file (including captured stdout/stderr) the candidate may write
    device_index: int | None = None  # GPU to use; None: the worker's own
    # Anti-hacking policy.
    guards: bool = True  # runtime checks: kernel really ran, torch ops, aliasing, mutation, caching, roofline
    torch_ops: str = "reject"  # torch compute ops in the candidate's forward: reject | warn | allow
    static_severity: dict[str, str] = field(default_factory=dict)  # check id (or "*") -> reject | warn
    timing_input_sets: int = 3  # timed calls draw their inputs at random from this many sets (outputs known)
    # With torch_ops=reject: least share of compute time in the candidate's own code (an honest tiny kernel
    # spends a fair share allocating its output in libtorch; hidden torch or numpy compute scores ~0).
    min_coverage: float = 0.25
    suspicious_speedup: float = 5.0  # above this, timing is re-measured and checked against the roofline
    roofline_slack: float = 2.0  # reject when faster than roofline / slack
    timeouts: StageTimeouts = field(default_factory=StageTimeouts)

    def __post_init__(self) -> None:
        if isinstance(self.timeouts, dict):
            self.timeouts = StageTimeouts(**self.timeouts)
        for name in ("correctness_trials", "timing_trials", "num_threads", "memory_limit_mb", "output_limit_mb",
                     "timing_input_sets"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.torch_ops not in ("reject", "warn", "allow"):
            raise ValueError(f"EvalConfig.torch_ops must be reject, warn or allow, got {self.torch_ops!r}")
        bad = {k: v for k, v in self.static_severity.items() if v not in ("reject", "warn")}
        if bad:
            raise ValueError(f"EvalConfig.static_severity values must be reject or warn, got {bad}")
        if self.warmup < 0:
            raise ValueError("EvalConfig.warmup must be >= 0")
        for name, value in asdict(self.timeouts).items():
            if value <= 0:
                raise ValueError(f"EvalConfig.timeouts.{name} must be > 0, got {value}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalConfig:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown EvalConfig fields: {', '.join(sorted(unknown))}")
        return cls(**data)
