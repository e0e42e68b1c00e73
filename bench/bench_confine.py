"""Cost of the candidate seccomp filter: installing it, and syscalls made under it.

Installation is timed in forked children of a warm process (confine imported, as in a supervisor)
and once in a fresh interpreter (loading libc through ctypes included). Syscall loops run in forked
children with and without the filter, interleaved, so machine noise hits both sides, and are timed in
CPU time of the looping thread (time spent preempted on a shared machine is left out):
`getppid` (a call whose verdict never depends on its arguments: the kernel's seccomp action cache
can skip the program), `kill(own, 0)` (argument checks, the longest path through the program),
open+close of /dev/null, and spawning `true` (fork + exec; wall time). Where gcc exists, the same two syscalls
also run in a C loop (inheriting the filter through exec), which shows the filter's own cost without
the interpreter's.

    python bench/bench_confine.py [--n 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kernelrl.evaluate.confine import install_seccomp


def in_fork(fn: Callable[[], object]) -> object:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def timed_install() -> float:
    start = time.perf_counter()
    reason = install_seccomp()
    elapsed = time.perf_counter() - start
    assert reason is None, reason
    return elapsed


def loop(name: str, n: int, filtered: bool) -> float:
    """Seconds per call of workload `name`, in a forked child."""
    def run() -> float:
        if filtered:
            assert install_seccomp() is None
        own = os.getpid()
        if name == "getppid":
            start = time.thread_time()
            for _ in range(n):
                os.getppid()
            return (time.thread_time() - start) / n
        if name == "kill(own, 0)":
            start = time.thread_time()
            for _ in range(n):
                os.kill(own, 0)
            return (time.thread_time() - start) / n
        if name == "open+close":
            start = time.thread_time()
            for _ in range(n):
                os.close(os.open("/dev/null", os.O_RDONLY))
            return (time.thread_time() - start) / n
        start = time.perf_counter()  # spawn
        for _ in range(n):
            subprocess.run(["true"], check=True)
        return (time.perf_counter() - start) / n

    return in_fork(run)  # type: ignore[return-value]


NATIVE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    long n = atol(argv[1]), pid = getpid();
    double t0 = now();
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    double t1 = now();
    for (long i = 0; i < n; i++) syscall(SYS_kill, pid, 0);
    double t2 = now();
    printf("%g %g\n", (t1 - t0) / n, (t2 - t1) / n);
    return 0;
}
"""


def native(exe: str, n: int, filtered: bool) -> list[float]:
    """Seconds per getppid and per kill(own, 0) in a C loop, in a forked (and filtered) child."""
    def run() -> list[float]:
        if filtered:
            assert install_seccomp() is None
        out = subprocess.run([exe, str(n)], capture_output=True, text=True, check=True).stdout
        return [float(x) for x in out.split()]

    return in_fork(run)  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200_000, help="calls per syscall loop")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per side")
    parser.add_argument("--installs", type=int, default=30)
    args = parser.parse_args()

    warm = [in_fork(timed_install) for _ in range(args.installs)]
    src = str(Path(__file__).resolve().parents[1] / "src")
    cold_code = ("import time; from kernelrl.evaluate.confine import install_seccomp; s = time.perf_counter(); "
                 "assert install_seccomp() is None; print(time.perf_counter() - s)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    cold = [float(subprocess.run([sys.executable, "-c", cold_code], capture_output=True, text=True, check=True,
                                 env=env).stdout) for _ in range(min(3, args.installs))]
    print(f"install_seccomp: {statistics.median(warm) * 1e3:.2f} ms median in a forked child of a warm process "
          f"(max {max(warm) * 1e3:.2f}, {len(warm)} runs); {statistics.median(cold) * 1e3:.2f} ms in a fresh "
          "interpreter (libc loaded through ctypes)")

    workloads = {"getppid": args.n, "kill(own, 0)": args.n, "open+close": max(1, args.n // 4),
                 "spawn true": max(1, args.n // 4000)}
    print(f"per call, medians of {args.rounds} interleaved rounds:")
    for name, n in workloads.items():
        sides: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for filtered in (False, True):
                sides[filtered].append(loop(name, n, filtered))
        off, on = statistics.median(sides[False]), statistics.median(sides[True])
        print(f"  {name:14s} {off * 1e9:10.0f} ns without  {on * 1e9:10.0f} ns with filter  "
              f"{(on / off - 1) * 100:+6.1f}%  ({n} calls)")

    gcc = shutil.which("gcc")
    if gcc is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "loop")
        subprocess.run([gcc, "-O2", "-x", "c", "-", "-o", exe], input=NATIVE, text=True, check=True)
        runs: dict[bool, list[list[float]]] = {False: [], True: []}
        for _ in range(args.rounds):
            for filtered in (False, True):
                runs[filtered].append(native(exe, args.n * 5, filtered))
    print("C loop, per call:")
    for i, name in enumerate(("getppid", "kill(own, 0)")):
        off = statistics.median(r[i] for r in runs[False])
        on = statistics.median(r[i] for r in runs[True])
        print(f"  {name:14s} {off * 1e9:10.1f} ns without  {on * 1e9:10.1f} ns with filter  "
              f"{(on - off) * 1e9:+6.1f} ns ({(on / off - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
