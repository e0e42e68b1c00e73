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
    """The facts a timing depends on."""
    import torch

    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu or platform.processor(), "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "torch": torch.__version__, "load_average": os.getloadavg()[0], "platform": platform.platform(),
            "speed_probe_ms": speed_probe()}


def speed_probe(repeats: int = 9) -> dict[str, float]:
    """Medians of two fixed single-thread workloads, timed as the record is written: the same kernel's timings in two
    records compare only if these do (a shared VM's CPU and memory speed vary from hour to hour)."""
    import statistics
    import time

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    x = torch.randn(2**21)
    torch_ms, python_ms = [], []
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            torch.relu(x).mul_(2.0).sum()
            torch_ms.append(1000 * (time.perf_counter() - start))
            start = time.perf_counter()
            sum(i * i for i in range(200_000))
            python_ms.append(1000 * (time.perf_counter() - start))
    finally:
        torch.set_num_threads(threads)
    return {"torch_2m_relu": statistics.median(torch_ms), "python_loop": statistics.median(python_ms)}


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
