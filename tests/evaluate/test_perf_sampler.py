"""The perf (kernel-driven) PC sampler on real child processes: samples follow the child's CPU time, on an
idle machine and next to a CPU hog on the child's own CPU, through threads and forks it creates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelrl.evaluate.build_identity import file_identities
from kernelrl.evaluate.perf_sampler import PerfSampler, perf_sampling_available
from kernelrl.evaluate.sampler import PcSamples, classify
from tests.evaluate.test_sampler import CHILD, build_busy_library, expected_mix, tell

HZ = 1000.0


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not perf_sampling_available():
        pytest.skip("perf_event_open sampling of a child is not permitted here")
    return build_busy_library(tmp_path_factory.mktemp("own"))


def cpu_seconds(pid: int) -> float:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def sample_run(lib: Path, mode: str, cpu: int | None = None) -> tuple[PcSamples, float, list[str]]:
    """Sample one run of `mode` (pinned to `cpu` if given) from its start to its "done"; the child's CPU
    seconds in that time (its threads that still run at the end)."""
    prefix = [] if cpu is None else ["taskset", "-c", str(cpu)]
    proc = subprocess.Popen([*prefix, sys.executable, "-c", CHILD, str(lib), mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert proc.stdout.readline().strip() == "ready"
        before = cpu_seconds(proc.pid)
        sampler = PerfSampler(proc.pid, hz=HZ)
        sampler.start()
        tell(proc)
        lines = []
        while (line := proc.stdout.readline().strip()) not in ("done", ""):
            lines.append(line)
        samples = sampler.stop()
        used = cpu_seconds(proc.pid) - before
        assert samples.error is None, samples.error
        assert int(lines[-1]) == expected_mix(100000)
        tell(proc)
        assert proc.wait(timeout=30) == 0
        return samples, used, lines[:-1]
    finally:
        proc.kill()
        proc.wait()


def test_samples_follow_cpu_time_in_own_code(lib: Path) -> None:
    samples, used, _ = sample_run(lib, "own")
    coverage = classify(samples, file_identities([lib]))
    assert 0.7 * used * HZ <= samples.total <= 1.2 * used * HZ, (samples, used)
    assert coverage.fraction > 0.95 and coverage.overhead < 0.05 * samples.total, samples
    assert samples.method == "perf"


def test_torch_is_fallback(lib: Path) -> None:
    samples, _, _ = sample_run(lib, "torch")
    coverage = classify(samples, file_identities([lib]))
    assert coverage.fraction < 0.1 and coverage.fallback > coverage.own + coverage.overhead, samples


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset")
def test_a_hog_on_the_same_cpu_does_not_starve_the_profile(lib: Path) -> None:
    """The regression the ptrace sampler had: next to a busy loop on the candidate's CPU its samples landed
    in the candidate's idle waits. Kernel samples are the candidate's CPU time, however little it gets."""
    cpu = min(os.sched_getaffinity(0))
    hog = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        samples, used, _ = sample_run(lib, "hybrid", cpu=cpu)
    finally:
        hog.kill()
        hog.wait()
    coverage = classify(samples, file_identities([lib]))
    assert 0.6 * used * HZ <= samples.total <= 1.2 * used * HZ, (samples, used)
    assert 0.15 < coverage.fraction < 0.85, samples  # two wall-clock halves; the hog shares the CPU unevenly
    assert coverage.own_hits + coverage.fallback_hits > 0.8 * samples.total, samples


def test_threads_created_while_sampling(lib: Path) -> None:
    samples, _, _ = sample_run(lib, "threads")  # the workers have exited: their CPU time is no longer in /proc
    coverage = classify(samples, file_identities([lib]))
    assert samples.threads_seen >= 4 and coverage.fraction > 0.9, samples
    cpu_s = min(4, len(os.sched_getaffinity(0))) * 0.4  # four threads busy for 0.4 s of wall time each
    assert samples.total >= 0.35 * cpu_s * HZ, samples


def test_a_forked_child_is_sampled(lib: Path) -> None:
    samples, _, lines = sample_run(lib, "fork")
    assert lines == ["child 7"]
    coverage = classify(samples, file_identities([lib]))
    assert coverage.own >= 0.5 * 0.4 * HZ, samples  # the child's 0.4 s of own work


SHORT_THREADS = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static long iterations;
static void* spin(void* arg) { volatile double x = 0; for (long i = 0; i < iterations; ++i) x += 1; return arg; }
int main(int argc, char** argv) {
  iterations = atol(argv[1]);
  int threads = atoi(argv[2]);
  getchar();  /* the sampler is attached */
  for (int i = 0; i < threads; ++i) { pthread_t t; pthread_create(&t, 0, spin, 0); pthread_join(t, 0); }
  return 0;
}
"""


def short_thread_samples(binary: Path, hz: float, iterations: int, threads: int) -> tuple[int, float]:
    """(samples, user CPU seconds) of a process that runs `threads` threads one after another, each spinning
    `iterations` times in user mode, sampled at `hz` from before the first thread starts."""
    proc = subprocess.Popen([str(binary), str(iterations), str(threads)], stdin=subprocess.PIPE)
    sampler = PerfSampler(proc.pid, hz=hz)
    sampler.start()
    proc.stdin.write(b"\n")
    proc.stdin.close()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    samples = sampler.stop()
    assert samples.error is None, samples.error
    return samples.total, usage.ru_utime


def test_the_untimed_profile_sees_threads_shorter_than_the_timed_period(tmp_path: Path) -> None:
    # perf's period restarts in every thread a process creates: at the timed calls' rate (2 kHz), a thread
    # that computes for less than 0.5 ms is never sampled. A [fallback-compute] verdict therefore stands
    # only on the untimed profile (judge.PROFILE_MORE_HZ), which must see threads of ~0.2 ms.
    from kernelrl.evaluate.judge import PROFILE_MORE_HZ, SAMPLING_HZ

    if not perf_sampling_available() or shutil.which("gcc") is None:
        pytest.skip("needs perf sampling and gcc")
    source = tmp_path / "short_threads.c"
    source.write_text(SHORT_THREADS)
    binary = tmp_path / "short_threads"
    subprocess.run(["gcc", "-O1", "-pthread", str(source), "-o", str(binary)], check=True)
    _, one = short_thread_samples(binary, PROFILE_MORE_HZ["perf"], 2_000_000, 1)  # calibrate: ~ns per iteration
    iterations = max(1000, int(2_000_000 * 200e-6 / max(one, 1e-4)))  # ~0.2 ms of CPU per thread
    fine, cpu = short_thread_samples(binary, PROFILE_MORE_HZ["perf"], iterations, 200)
    coarse, coarse_cpu = short_thread_samples(binary, SAMPLING_HZ["perf"], iterations, 200)
    expected = cpu * PROFILE_MORE_HZ["perf"]
    assert fine >= 0.5 * expected, (
        f"{fine} samples of 200 threads x {1e3 * cpu / 200:.2f} ms at {PROFILE_MORE_HZ['perf']:.0f} Hz, expected "
        f"~{expected:.0f} (at {SAMPLING_HZ['perf']:.0f} Hz: {coarse} of ~{coarse_cpu * SAMPLING_HZ['perf']:.0f})")
