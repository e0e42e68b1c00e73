"""Cost of the PC samplers (perf: kernel-driven, the default; ptrace: the fallback): slowdown of a
compute-bound C loop sampled at each rate, vs unsampled.

One child process runs a fixed amount of float work per trial (a C loop loaded with ctypes) and
reports the trial's wall time and, from /proc/thread-self/schedstat, its time on a CPU and waiting
for one; trials with and without sampling are interleaved so machine noise hits every side alike.
The rest of the wall time is time the loop was stopped by the sampler, so on a shared machine the
cost on a dedicated core is estimated as (extra CPU time + stopped time) / unsampled CPU time.
The ptrace sampler's own CPU time is printed per second sampled (the perf sampler has no thread).

    python bench/bench_sampler.py [--rounds 15] [--iters 40000000] [--hz 1000 2000] [--perf-hz 1000 4000 10000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from results_file import write_result

from kernelrl.evaluate.perf_sampler import PerfSampler, perf_sampling_available
from kernelrl.evaluate.sampler import PcSampler, sampling_available

C_LOOP = r"""
float work(long n) { float x = 1.0f; for (long i = 0; i < n; i++) x = x * 1.0000001f + 1e-7f; return x; }
"""
CHILD = r"""
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.work.argtypes, lib.work.restype = [ctypes.c_long], ctypes.c_float
def sched():
    with open("/proc/thread-self/schedstat") as f:
        return [int(v) * 1e-9 for v in f.read().split()[:2]]
print("ready", flush=True)
for line in sys.stdin:
    (run, queued), wall = sched(), time.perf_counter()
    lib.work(int(line))
    wall, (run2, queued2) = time.perf_counter() - wall, sched()
    print(wall, run2 - run, queued2 - queued, flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="trials per side")
    parser.add_argument("--iters", type=int, default=40_000_000, help="loop iterations per trial")
    parser.add_argument("--hz", type=float, nargs="+", default=[1000.0, 2000.0], help="ptrace sampling rates")
    parser.add_argument("--perf-hz", type=float, nargs="+", default=[1000.0, 4000.0, 10000.0], help="perf sampling rates")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_sampler.json")
    args = parser.parse_args()
    rates: list[tuple[str, float]] = []
    if sampling_available():
        rates += [("ptrace", hz) for hz in args.hz]
    if perf_sampling_available():
        rates += [("perf", hz) for hz in args.perf_hz]
    if not rates:
        print("neither perf nor ptrace sampling is available here")
        return
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "libloop.so"
        (Path(tmp) / "loop.c").write_text(C_LOOP)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(Path(tmp) / "loop.c")], check=True)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(lib)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        sides: list[tuple[str, float] | None] = [None, *rates]
        wall: dict[tuple[str, float] | None, list[float]] = {side: [] for side in sides}
        cpu: dict[tuple[str, float] | None, list[float]] = {side: [] for side in sides}
        stopped: dict[tuple[str, float] | None, list[float]] = {side: [] for side in sides}
        sampler_cpu: dict[tuple[str, float] | None, list[float]] = {side: [] for side in sides}
        ticks: dict[tuple[str, float] | None, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds + 1):  # the first round warms up and is dropped
            for side in sides:
                sampler: PcSampler | PerfSampler | None = None
                if side:
                    sampler = (PcSampler if side[0] == "ptrace" else PerfSampler)(child.pid, hz=side[1])
                if sampler:
                    sampler.start()
                child.stdin.write(f"{args.iters}\n")
                child.stdin.flush()
                trial_wall, trial_cpu, trial_queued = map(float, child.stdout.readline().split())
                if sampler:
                    samples = sampler.stop()
                    assert samples.error is None, samples.error
                    sampler_cpu[side].append(samples.cpu_s / trial_wall)
                    ticks[side].append(samples.ticks / trial_wall)
                wall[side].append(trial_wall)
                cpu[side].append(trial_cpu)
                stopped[side].append(trial_wall - trial_cpu - trial_queued)
        child.stdin.close()
        child.wait()
    base_wall, base_cpu, base_stopped = (statistics.median(v[1:]) for v in (wall[None], cpu[None], stopped[None]))
    print(f"unsampled: {base_wall * 1e3:.1f} ms wall, {base_cpu * 1e3:.1f} ms on a CPU, "
          f"{base_stopped * 1e3:.1f} ms neither running nor runnable per trial (median of {args.rounds})")
    results: dict[str, dict[str, float]] = {"unsampled": {"wall_ms": base_wall * 1e3, "cpu_ms": base_cpu * 1e3}}
    for side in rates:
        w, c, st = (statistics.median(v[1:]) for v in (wall[side], cpu[side], stopped[side]))
        dedicated = ((c - base_cpu) + (st - base_stopped)) / base_cpu * 100
        samples_per_s = statistics.median(ticks[side][1:])
        thread = statistics.median(sampler_cpu[side][1:]) * 100
        print(f"{side[0]:>6} {side[1]:6.0f} Hz: wall +{(w / base_wall - 1) * 100:5.1f}%, CPU +{(c / base_cpu - 1) * 100:4.1f}%, "
              f"stopped {st / base_cpu * 100:4.1f}%, dedicated-core estimate +{dedicated:4.1f}%; "
              f"{samples_per_s:.0f} samples/s, sampler thread {thread:.1f}% of a core")
        results[f"{side[0]} {side[1]:.0f} Hz"] = {
            "wall_pct": (w / base_wall - 1) * 100, "cpu_pct": (c / base_cpu - 1) * 100,
            "dedicated_core_pct": dedicated, "samples_per_s": samples_per_s, "sampler_thread_pct": thread}
    if not args.no_write:
        print(f"written: {write_result('bench_sampler', results)}")


if __name__ == "__main__":
    main()
