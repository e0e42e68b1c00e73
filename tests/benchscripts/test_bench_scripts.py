"""Every benchmark script under bench/ still runs end to end (tiny settings; the numbers are not checked)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kernelrl

ROOT = Path(__file__).resolve().parents[2]
SRC = str(Path(kernelrl.__file__).resolve().parents[1])
TINY = {
    "bench_rl_estimators.py": ["--samples", "256", "--tokens", "32", "--repeats", "1", "--threads", "1",
                               "--keep-freed-memory", "--no-write"],
    "bench_guards.py": ["--n", "2", "--no-write"],
    "bench_trainer_vs_trl.py": ["--steps", "2", "--prompts", "1", "--group", "2", "--new", "4", "--no-write"],
    "bench_continuous_batching.py": ["--requests", "8", "--batch-size", "4", "--max-new-tokens", "16", "--hidden",
                                     "32", "--layers", "1", "--repeats", "1", "--no-write"],
    "bench_copris.py": ["--steps", "2", "--groups", "2", "--n", "2", "--concurrency", "4", "--max-new-tokens", "16",
                        "--repeats", "1", "--no-write"],
    "bench_synth.py": ["--n", "3", "--no-write"],
    "bench_confine.py": ["--n", "2000", "--rounds", "1", "--installs", "2"],
    "bench_build_cost.py": ["--repeats", "1", "--no-write"],
    "bench_build_demand.py": ["--no-write", "rl.steps=1", "sft.steps=2", "task.n_heldout=4"],
    "bench_gym_budget.py": ["--no-write", "--floor-repeats", "1", "rl.steps=1", "sft.steps=2", "task.n_heldout=4"],
}


def test_references_ahead_ab_switches_the_lookahead_off_in_one_arm_only() -> None:
    """The A/B's off arm queues no reference ahead (the script exits non-zero if it did); the on arm does, once the
    first step has handed out its groups (the next step's items)."""
    out = run_bench("bench_references_ahead.py", ["--rounds", "1", "--no-write", "rl.steps=2", "sft.steps=2",
                                                  "task.n_heldout=4"])
    queued = {arm: int(n) for arm, n in re.findall(r"round 0 (on|off): .* (\d+) references queued ahead", out)}
    assert queued.keys() == {"on", "off"} and queued["off"] == 0 and queued["on"] > 0, out


def run_bench(script: str, args: list[str]) -> str:
    """Run bench/`script` with `args` in a subprocess; its stdout (a non-zero exit fails the test)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.parametrize("script", sorted(TINY))
def test_bench_script_runs(script: str) -> None:
    assert run_bench(script, TINY[script]).strip()


def test_speed_probe_times_compute_and_kernel_work_and_leaves_no_child() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from results_file import speed_probe
    finally:
        sys.path.remove(str(ROOT / "bench"))
    before = _children()
    probe = speed_probe(repeats=2)
    assert set(probe) == {"torch_2m_relu", "python_loop", "memfd_8mib_write", "fork_reap"}
    assert all(0 < value < 10_000 for value in probe.values()), probe
    assert _children() == before  # every forked child was reaped (a zombie is still listed)


def _children() -> set[str]:
    return {pid for task in Path("/proc/self/task").iterdir() for pid in (task / "children").read_text().split()}


def test_eval_overhead_finds_the_gyms_processes_and_their_cpu() -> None:
    """The bench's CPU per evaluation is read from the supervisors' /proc entries: a search that found none (the
    bubblewrap that starts a supervisor has its command line too) would report 0 ms."""
    out = run_bench("bench_eval_overhead.py", ["--n", "2", "--workers", "1", "--no-write"])
    found = re.search(r"CPU per evaluation: (\d+) ms in the gym's processes", out)
    assert found, out[-2000:]
    assert int(found.group(1)) > 0, out[-2000:]
