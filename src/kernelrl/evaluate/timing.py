"""Timers: a monotonic clock on CPU; CUDA events with all streams synchronised and L2 flushed on GPU.

`measure` runs warm-up calls, then timed trials; optional hooks run outside the timed region before
and after each trial (the pipeline uses them to check outputs of timed calls on fresh inputs).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass
class Measurement:
    median_ms: float
    spread_ms: float  # interquartile range
    trials: int


class TrialHooks(Protocol):
    def before(self, index: int, total: int) -> None: ...
    def after(self, index: int, total: int, output: Any) -> None: ...


class CpuClock:
    discard_first = False

    def __init__(self) -> None:
        self._start = 0

    def prepare(self) -> None:
        pass

    def start(self) -> None:
        self._start = time.perf_counter_ns()

    def stop(self) -> float:
        return (time.perf_counter_ns() - self._start) / 1e6


class CudaClock:
    """CUDA events; a device-wide sync (every stream) before the stop event; L2 flushed before each trial."""

    discard_first = True

    def __init__(self, device: torch.device) -> None:
        self.device = device
        props = torch.cuda.get_device_properties(device)
        size = max(int(getattr(props, "L2_cache_size", 50 * 2**20)) * 2, 2**20)
        self._flush = torch.empty(size // 4, dtype=torch.int32, device=device)
        self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def prepare(self) -> None:
        self._flush.zero_()
        torch.cuda.synchronize(self.device)

    def start(self) -> None:
        self._events[0].record()

    def stop(self) -> float:
        torch.cuda.synchronize(self.device)  # joins work queued on every stream, not only the current one
        self._events[1].record()
        torch.cuda.synchronize(self.device)
        return self._events[0].elapsed_time(self._events[1])


def clock_for(device: torch.device) -> CpuClock | CudaClock:
    return CudaClock(device) if device.type == "cuda" else CpuClock()


def _summarise(samples_ms: list[float]) -> Measurement:
    samples = sorted(samples_ms)
    if len(samples) >= 4:
        q = statistics.quantiles(samples, n=4)
        spread = q[2] - q[0]
    else:
        spread = samples[-1] - samples[0]
    return Measurement(statistics.median(samples), spread, len(samples))


def measure(
    fn: Callable[[], Any],
    clock: CpuClock | CudaClock,
    warmup: int,
    trials: int,
    budget_s: float,
    hooks: TrialHooks | None = None,
) -> Measurement:
    """Median time of `fn()` over at least 5 trials (fewer than `trials` when a call is slow)."""
    for _ in range(warmup):
        fn()
    clock.prepare()
    clock.start()
    fn()
    first_ms = clock.stop()
    total = max(5, min(trials, int(budget_s * 1000 / max(first_ms, 1e-3))))
    samples = [] if clock.discard_first else [first_ms]
    for index in range(total - len(samples)):
        if hooks:
            hooks.before(index, total)
        clock.prepare()
        clock.start()
        output = fn()
        elapsed = clock.stop()
        if hooks:
            hooks.after(index, total, output)
        samples.append(elapsed)
    return _summarise(samples)
