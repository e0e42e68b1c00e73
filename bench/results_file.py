"""Benchmark scripts record what they measured in bench/results/NAME.json: the numbers, the command that
produced them, the machine and the date. The README quotes these files, never numbers typed by hand."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """The facts a timing depends on: what a repro record names (`kernelrl.repro.record.machine`: CPU, cores,
    torch and its vector kernels), the Python, the load and a speed probe."""
    from kernelrl.repro.record import machine as record_machine

    return {**record_machine(), "python": platform.python_version(), "load_average": os.getloadavg()[0],
            "platform": platform.platform(), "speed_probe_ms": speed_probe()}


def speed_probe(repeats: int = 9) -> dict[str, float]:
    """Medians of fixed workloads, timed as the record is written: the same kernel's timings in two records compare
    only if these do (a shared VM's CPU, memory and kernel speed vary from hour to hour). Two single-thread compute
    ones (a 2M-element ReLU, a Python loop) and two of the kernel work every evaluation does: writing 8 MiB into a
    new shared-memory file (fresh pages, as an input arena) and forking this process and reaping the child (as the
    judge and its candidate are made). The compute probes alone missed a slow hour: a record read the ReLU faster
    than the day before (1.6 vs 2.4 ms) while the gym's own cost per evaluation doubled (119 vs 61 ms)."""
    import ctypes
    import statistics
    import time

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    x = torch.randn(2**21)
    view = memoryview((ctypes.c_char * x.nbytes).from_address(x.data_ptr())).cast("B")
    times: dict[str, list[float]] = {"torch_2m_relu": [], "python_loop": [], "memfd_8mib_write": [], "fork_reap": []}

    def timed(name: str, work: Any) -> None:
        start = time.perf_counter()
        work()
        times[name].append(1000 * (time.perf_counter() - start))

    def write_memfd() -> None:
        fd = os.memfd_create("kernelrl-probe")
        try:
            os.pwrite(fd, view, 0)
        finally:
            os.close(fd)

    def fork_reap() -> None:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    try:
        for _ in range(repeats):
            timed("torch_2m_relu", lambda: torch.relu(x).mul_(2.0).sum())
            timed("python_loop", lambda: sum(i * i for i in range(200_000)))
            timed("memfd_8mib_write", write_memfd)
            timed("fork_reap", fork_reap)
    finally:
        torch.set_num_threads(threads)
    return {name: statistics.median(values) for name, values in times.items()}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=RESULTS.parent,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def write_result(name: str, numbers: dict[str, Any]) -> Path:
    """Write bench/results/NAME.json and return its path."""
    RESULTS.mkdir(exist_ok=True)
    record = {
        "command": "python " + " ".join([f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "revision": _git("rev-parse", "HEAD"),
        "dirty": _git("diff", "--name-only", "HEAD", "--", "src", "bench").split(),  # uncommitted code it ran
        "machine": machine(),
        "results": numbers,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
