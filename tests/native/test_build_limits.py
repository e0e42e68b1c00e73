"""Every compiler run has rlimits: memory, CPU time, file size (real g++ builds that would exceed them)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kernelrl
from kernelrl.native.build import CompileError, full_flags, run_compiler

# The path is built by a macro, so the textual include check cannot see it: only the rlimits stop the compiler.
DEV_ZERO = '#define ZERO "/dev/zero"\n#include ZERO\nvoid f(float* x) { x[0] = 1.f; }\n'
GUARD_AS = 3 * 2**30  # the test's own ceiling, so a compiler without limits cannot take the machine down

MEMORY_PROBE = r"""
import json, os, resource, sys, tempfile, time
from kernelrl.evaluate.builds import BuildService
from kernelrl.native.build import CompileError, build_shared_library

source = sys.argv[1]
results = {}
start = time.monotonic()
try:
    build_shared_library(source)
    results["local"] = "built"
except CompileError as exc:
    results["local"] = exc.log
reply = BuildService(None).handle({"source": source, "language": "c++", "flags": []}, time.monotonic() + 60)
results["broker"] = reply.get("log", "built")
results["seconds"] = time.monotonic() - start
results["max_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(results))
"""


def _guard() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GUARD_AS, GUARD_AS))


def test_including_dev_zero_through_a_macro_stops_at_the_memory_limit(tmp_path: Path) -> None:
    env = {**os.environ, "KERNELRL_BUILD_MEMORY_MB": "512", "KERNELRL_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(Path(kernelrl.__file__).parents[1])}  # this checkout's kernelrl
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, DEV_ZERO], env=env, capture_output=True, text=True,
                         timeout=300, preexec_fn=_guard)
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.splitlines()[-1])
    for route in ("local", "broker"):
        assert "out of memory" in results[route] or "memory exhausted" in results[route], results[route]
    # Without a limit of its own, cc1plus grows to the test's 3 GiB guard (reading 1 GiB of zeros first).
    assert results["max_rss_mb"] < 512, results


def test_a_library_past_the_file_size_limit_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELRL_BUILD_FILE_MB", "4")
    big, small = tmp_path / "big", tmp_path / "small"
    big.mkdir()
    small.mkdir()
    source = "char big[16 << 20] = {1};\nvoid f(float* x) { x[0] = big[0]; }\n"
    with pytest.raises(CompileError) as info:
        run_compiler(source, "c++", full_flags("c++"), str(big), timeout=60)
    assert "file size limit" in str(info.value).lower(), str(info.value)
    written = [p.stat().st_size for p in big.iterdir() if p.is_file()]
    assert max(written) <= 4 * 2**20, written
    # An ordinary kernel builds under the same limits, with an empty log.
    out, log = run_compiler("void f(float* x) { x[0] = 1.f; }\n", "c++", full_flags("c++"), str(small), timeout=60)
    assert out.is_file() and log == ""


def test_a_compile_that_spins_stops_at_the_cpu_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELRL_BUILD_CPU_S", "1")
    source = (
        "constexpr long spin(long n) { long s = 0; for (long i = 0; i < n; ++i) s += i % 7; return s; }\n"
        "constexpr long v = spin(2000000000L);\n"
        "long f() { return v; }\n"
    )
    flags = [*full_flags("c++"), "-fconstexpr-loop-limit=2147483647", "-fconstexpr-ops-limit=4294967295000"]
    start = time.monotonic()
    with pytest.raises(CompileError) as info:
        run_compiler(source, "c++", flags, str(tmp_path), timeout=45)
    assert time.monotonic() - start < 20
    assert "CPU time limit" in info.value.log or "killed by" in info.value.message, str(info.value)

