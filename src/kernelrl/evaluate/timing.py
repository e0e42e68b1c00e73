"""Timers: a monotonic clock on CPU; CUDA events with all streams synchronised and L2 flushed on GPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Measurement:
    median_ms: float
    spread_ms: float  # interquartile range
    trials: int


def _summarise(samples_ms: list[float]) -> Measurement:
    samples = sorted(samples_ms)
    if len(samples) >= 4:
        q = statistics.quantiles(samples, n=4)
        spread = q[2] - q[0]
    else:
        spread = samples[-1] - samples[0]
    return Measurement(statistics.median(samples), spread, len(samples))


def _trial_count(first_ms: float, trials: int, budget_s: float) -> int:
    return max(5, min(trials, int(budget_s * 1000 / max(first_ms, 1e-3))))


def time_cpu(fn: Callable[[], Any], warmup: int, trials: int, budget_s: float) -> Measurement:
    """Median wall time of `fn()` by `time.perf_counter_ns` after `warmup` calls; at least 5 trials."""
    for _ in range(warmup):
        fn()
    start = time.perf_counter_ns()
    fn()
    first_ms = (time.perf_counter_ns() - start) / 1e6
    samples = []
    for _ in range(_trial_count(first_ms, trials, budget_s)):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return _summarise(samples)


class L2Flusher:
    """Writes a buffer twice the size of the GPU's L2 cache so no trial starts with a warm cache."""

    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        size = max(int(getattr(props, "L2_cache_size", 50 * 2**20)) * 2, 2**20)
        self.buffer = torch.empty(size // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def time_cuda(fn: Callable[[], Any], warmup: int, trials: int, budget_s: float, device: torch.device) -> Measurement:
    """Median CUDA-event time of `fn()`; device-wide sync (all streams) before each stop; first trial dropped."""
    flush = L2Flusher(device)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    samples = []
    count = None
    index = 0
    while count is None or index < count + 1:
        flush()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        torch.cuda.synchronize(device)  # joins work queued on every stream, not only the current one
        stop.record()
        torch.cuda.synchronize(device)
        elapsed = start.elapsed_time(stop)
        if count is None:
            count = _trial_count(elapsed, trials, budget_s)
        else:
            samples.append(elapsed)
        index += 1
    return _summarise(samples)
