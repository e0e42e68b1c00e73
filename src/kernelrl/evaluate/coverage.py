"""Time-based profiling coverage from outside the candidate's process (Dr. Kernel's PR/PRS measure on a
CPU) and the proof-of-work rule built on it.

The judge samples the candidate's instruction pointers during the timed calls (`evaluate.sampler`);
`coverage_record` turns the samples into `EvalResult.coverage`, `more_profile_seconds` says whether a
short or inconclusive profile needs more, and `coverage_failure` says whether hidden fallback compute
must be rejected. Statistics use raw sample counts: a late sample of a thread that waited for a CPU
stands for a long stretch of time, so weighted counts would overstate the evidence under load.
"""

from __future__ import annotations

import math
import os
from typing import Any

PROFILE_MIN_S = 0.025  # when the timed calls gave too few compute samples, profile this long in all
PROFILE_SUSPECT_S = 0.4  # when fallback code leads without settling it
SUSPECT_FALLBACK_HITS = 3  # ... with at least this many samples (and twice the own ones)
MIN_COMPUTE_SAMPLES = 20  # fewer compute samples than this say nothing about coverage


def coverage_record(samples: Any, own_objects: tuple[str, ...], seconds: float) -> dict[str, Any]:
    """`EvalResult.coverage` from a sampler's `PcSamples`: own / (own + fallback) in time, the counts in
    periods of the sampler's rate, raw sample counts, `seconds` of profile and the top objects."""
    from kernelrl.evaluate.sampler import classify

    cov = classify(samples, own_objects)
    top = sorted(samples.by_object.items(), key=lambda kv: -kv[1])[:4]
    return {"fraction": cov.fraction, "own": cov.own, "fallback": cov.fallback, "overhead": cov.overhead,
            "samples": cov.total, "method": "ip-sampling", "own_hits": cov.own_hits, "fallback_hits": cov.fallback_hits,
            "seconds": seconds, "top": [[os.path.basename(k), v] for k, v in top]}


def more_profile_seconds(cov: dict[str, Any] | None, min_coverage: float) -> float:
    """How long to profile on after the timed calls: PROFILE_SUSPECT_S when fallback code leads without
    settling it, PROFILE_MIN_S when they gave too few compute samples to say anything, else nothing
    (honest kernels with measurable compute pay nothing)."""
    if not cov:
        return 0.0
    own, fallback = cov["own_hits"], cov["fallback_hits"]
    if fallback >= SUSPECT_FALLBACK_HITS and fallback > 2 * own and upper_bound(own, own + fallback) >= min_coverage:
        return PROFILE_SUSPECT_S
    if own + fallback < MIN_COMPUTE_SAMPLES and cov["seconds"] < PROFILE_MIN_S:
        return PROFILE_MIN_S
    return 0.0


def coverage_failure(cov: dict[str, Any] | None, min_coverage: float) -> str | None:
    """The `[fallback-compute]` message when even an upper bound on the coverage is under `min_coverage`."""
    if not cov or cov["fraction"] is None:
        return None
    if upper_bound(cov["own_hits"], cov["own_hits"] + cov["fallback_hits"]) >= min_coverage:
        return None
    return (f"[fallback-compute] only {cov['fraction']:.0%} of the forward's compute time was in your own kernel "
            f"({cov['fallback']} of {cov['own'] + cov['fallback']} samples in libtorch, BLAS or numpy: "
            f"{', '.join(name for name, _ in cov['top'])}); do the computation in your kernel")


def upper_bound(successes: float, trials: float, z: float = 2.0) -> float:
    """Wilson score upper bound of a proportion (~97.5% one-sided at z=2); 1.0 without trials. A candidate is
    rejected for low coverage only when even this bound is below the threshold, so a short profile of an
    honest kernel (a few samples, some in libtorch allocating its output) is never rejected by chance."""
    if trials <= 0:
        return 1.0
    p = successes / trials
    centre = p + z * z / (2 * trials)
    margin = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return min(1.0, (centre + margin) / (1 + z * z / trials))
