"""Time-based profiling coverage from outside the candidate's process (Dr. Kernel's PR/PRS measure on a
CPU) and the proof-of-work rule built on it.

The judge samples the candidate's instruction pointers during the timed calls (`evaluate.sampler`);
`coverage_record` turns the samples into `EvalResult.coverage`, `profile_settled` says whether a
short or inconclusive profile needs more, and `coverage_failure` says whether hidden fallback compute
must be rejected. Statistics use raw sample counts: a late sample of a thread that waited for a CPU
stands for a long stretch of time, so weighted counts would overstate the evidence under load.
"""

from __future__ import annotations

import math
import os
from typing import Any

PROFILE_MIN_S = 0.025  # too few compute samples: profile until the candidate has run this long (CPU time)
PROFILE_MAX_S = 1.0  # an unsettled profile (fallback leads, too few samples to say by how much) ends here
MIN_COMPUTE_SAMPLES = 20  # fewer compute samples than this say nothing about coverage


def coverage_record(samples: Any, own_objects: Any, seconds: float, cpu_seconds: float) -> dict[str, Any]:
    """`EvalResult.coverage` from a sampler's `PcSamples`: own / (own + fallback) in time, the counts in
    periods of the sampler's rate, raw sample counts, `seconds` of profile (wall clock), the candidate's
    `cpu_seconds` in it and the top objects. Own code is told by identity, never by path: the libraries
    the build broker built (`build_identity.broker_builds`); `own_objects` (the judge's path prefixes) only
    says that a profile was wanted and takes no part in the attribution."""
    from kernelrl.evaluate.sampler import classify

    builds, runtime = _trusted_code()
    cov = classify(samples, builds, runtime)
    top = sorted(samples.by_object.items(), key=lambda kv: -kv[1])[:4]
    return {"fraction": cov.fraction, "own": cov.own, "fallback": cov.fallback, "overhead": cov.overhead,
            "samples": cov.total, "method": samples.method, "own_hits": cov.own_hits, "fallback_hits": cov.fallback_hits,
            "seconds": seconds, "cpu_seconds": cpu_seconds, "lost": samples.lost, "top": [[os.path.basename(k), v] for k, v in top]}


_TRUSTED: list[Any] = []  # per process (the judge): the broker's builds (each verified once), its own runtime


def _trusted_code() -> tuple[Any, Any]:
    from kernelrl.evaluate.build_identity import broker_builds, runtime_identities

    if not _TRUSTED:
        _TRUSTED.extend((broker_builds(), runtime_identities()))
    return _TRUSTED[0], _TRUSTED[1]


def profile_settled(cov: dict[str, Any] | None, min_coverage: float) -> bool:
    """Whether more samples could not change the coverage verdict. It is settled at once when the Wilson
    lower bound of the own share is over `min_coverage` (an honest kernel: two or three own samples do);
    otherwise, with too few samples to say anything, not before the candidate has had PROFILE_MIN_S of
    CPU; then once the own kernel leads, once even the upper bound is under the threshold (rejected), or
    once there are enough samples and the own share is over a third. A profile goes on (at most
    PROFILE_MAX_S) while fallback code leads and neither bound has crossed the threshold. Honest kernels settle with the timed
    calls' profile. Counting samples and the candidate's CPU time, not wall time, keeps a loaded machine (a
    candidate that waits for a CPU, or for a judge that waits for one) from ending a profile early."""
    if not cov:
        return True
    own, fallback = cov["own_hits"], cov["fallback_hits"]
    trials = own + fallback
    if lower_bound(own, trials) >= min_coverage:  # the own kernel's share is over the threshold, however few samples
        return True
    if trials < MIN_COMPUTE_SAMPLES and cov["cpu_seconds"] < PROFILE_MIN_S:
        return False
    if fallback <= own or upper_bound(own, trials) < min_coverage:
        return True
    return trials >= MIN_COMPUTE_SAMPLES and fallback <= 2 * own


def coverage_failure(cov: dict[str, Any] | None, min_coverage: float) -> str | None:
    """The `[fallback-compute]` message when even an upper bound on the coverage is under `min_coverage`."""
    if not cov or cov["fraction"] is None:
        return None
    if upper_bound(cov["own_hits"], cov["own_hits"] + cov["fallback_hits"]) >= min_coverage:
        return None
    return (f"[fallback-compute] only {cov['fraction']:.0%} of the forward's compute time was in your own kernel "
            f"({cov['fallback']} of {cov['own'] + cov['fallback']} samples in code the build broker did not build from "
            f"your source: libtorch, BLAS, numpy, torch.compile's code, copied libraries: "
            f"{', '.join(name for name, _ in cov['top'])}); do the computation in a kernel you build with load_cpp")


def _wilson(successes: float, trials: float, z: float) -> tuple[float, float]:
    """(centre, half-width) of the Wilson score interval of a proportion, both over its denominator."""
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = p + z * z / (2 * trials)
    margin = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return centre / denominator, margin / denominator


def lower_bound(successes: float, trials: float, z: float = 2.0) -> float:
    """Wilson score lower bound of a proportion (~97.5% one-sided at z=2); 0.0 without trials."""
    if trials <= 0:
        return 0.0
    centre, margin = _wilson(successes, trials, z)
    return max(0.0, centre - margin)


def upper_bound(successes: float, trials: float, z: float = 2.0) -> float:
    """Wilson score upper bound of a proportion (~97.5% one-sided at z=2); 1.0 without trials. A candidate is
    rejected for low coverage only when even this bound is below the threshold, so a short profile of an
    honest kernel (a few samples, some in libtorch allocating its output) is never rejected by chance."""
    if trials <= 0:
        return 1.0
    centre, margin = _wilson(successes, trials, z)
    return min(1.0, centre + margin)
