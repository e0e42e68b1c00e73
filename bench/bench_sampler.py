"""Cost of the ptrace PC sampler: slowdown of a compute-bound C loop sampled at each rate, vs unsampled.

One child process runs a fixed amount of float work per trial (a C loop loaded with ctypes) and
reports the trial's wall time and, from /proc/thread-self/schedstat, its time on a CPU and waiting
for one; trials with and without sampling are interleaved so machine noise hits every side alike.
The rest of the wall time is time the loop was stopped by the sampler, so on a shared machine the
cost on a dedicated core is estimated as (extra CPU time + stopped time) / unsampled CPU time.
The sampler's own CPU time is printed per second sampled.

    python bench/bench_sampler.py [--rounds 15] [--iters 40000000] [--hz 1000 2000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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
    parser.add_argument("--hz", type=float, nargs="+", default=[1000.0, 2000.0], help="sampling rates")
    args = parser.parse_args()
    if not sampling_available():
        print("ptrace sampling is not available here")
        return
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "libloop.so"
        (Path(tmp) / "loop.c").write_text(C_LOOP)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(Path(tmp) / "loop.c")], check=True)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(lib)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        sides: list[float | None] = [None, *args.hz]
        wall: dict[float | None, list[float]] = {side: [] for side in sides}
        cpu: dict[float | None, list[float]] = {side: [] for side in sides}
        stopped: dict[float | None, list[float]] = {side: [] for side in sides}
        sampler_cpu: dict[float | None, list[float]] = {side: [] for side in sides}
        ticks: dict[float | None, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds + 1):  # the first round warms up and is dropped
            for side in sides:
                sampler = PcSampler(child.pid, hz=side) if side else None
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
    for side in args.hz:
        w, c, s = (statistics.median(v[1:]) for v in (wall[side], cpu[side], stopped[side]))
        print(f"{side:6.0f} Hz: wall +{(w / base_wall - 1) * 100:5.1f}%, CPU +{(c / base_cpu - 1) * 100:4.1f}%, "
              f"stopped {s / base_cpu * 100:4.1f}%, dedicated-core estimate "
              f"+{((c - base_cpu) + (s - base_stopped)) / base_cpu * 100:4.1f}%; "
              f"{statistics.median(ticks[side][1:]):.0f} ticks/s, sampler thread "
              f"{statistics.median(sampler_cpu[side][1:]) * 100:.1f}% of a core")


if __name__ == "__main__":
    main()
