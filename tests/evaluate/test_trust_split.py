"""The trust split: candidate code runs in its own confined process; the judge's verdict cannot be forged
from there. Each candidate here attacks something the judge owns; the anti-hacking policy is relaxed
where it would stop the attack before it runs (static checks warn only), so the split itself is tested.
"""

from __future__ import annotations

import itertools
import os
import random
import time

import pytest

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, Status
from kernelrl.evaluate.sampler import sampling_available
from kernelrl.evaluate.timing_inputs import changing_order
from kernelrl.tasks import Task
from tests.evaluate import candidates as C

WAIVED = EvalConfig(static_severity={"*": "warn"}, timing_trials=10, timing_budget_s=0.5)

HEADER = '''
import os, sys, threading, time
import numpy as np
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp(r"""{kernel}""", ["scaled_relu"])
'''
WRONG_KERNEL = C.KERNEL.replace("(x[i] > 0 ? x[i] : 0) * s", "x[i] * s")  # wrong on negative inputs


def candidate(body: str, kernel: str = C.KERNEL, extra: str = "") -> Candidate:
    source = HEADER.format(kernel=kernel) + extra + '''

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
''' + body
    return Candidate(source)


KERNEL_CALL = "        y = torch.empty_like(x)\n        lib.scaled_relu(x, y, x.numel(), self.scale)\n"


@pytest.fixture(scope="module")
def pool():
    with EvalPool(workers=1, config=WAIVED) as pool:
        yield pool


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(id="test/scaled_relu", source=C.RELU_TASK.replace("n = 4096", "n = 1 << 16"))


def test_patching_the_comparator_in_the_candidate_process_changes_nothing(pool: EvalPool, task: Task) -> None:
    patch = '''
import kernelrl.evaluate.compare as _compare
_compare.compare_outputs = lambda *a, **k: _compare.Comparison(True)
torch.allclose = lambda *a, **k: True
'''
    result = pool.evaluate(task, candidate(KERNEL_CALL + "        return y\n", WRONG_KERNEL, patch))
    assert result.status == Status.INCORRECT, result.feedback


def test_patching_the_clock_in_the_candidate_process_changes_nothing(pool: EvalPool, task: Task) -> None:
    honest = pool.evaluate(task, candidate(KERNEL_CALL + "        return y\n"))
    patch = "time.perf_counter_ns = lambda: 0\ntime.perf_counter = lambda: 0.0\ntime.monotonic = lambda: 0.0\n"
    slow_body = KERNEL_CALL + "        time.sleep(0.002)\n        return y\n"
    result = pool.evaluate(task, candidate(slow_body, extra=patch))
    assert honest.status == result.status == Status.OK, result.feedback
    assert result.timing.candidate_ms >= 2.0 > honest.timing.candidate_ms  # the sleep counts on the judge's clock


def test_an_output_cached_across_calls_is_caught(pool: EvalPool, task: Task) -> None:
    body = '''        if not hasattr(self, "cached"):
            self.calls = 0
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls > 5 and hasattr(self, "cached"):
            return self.cached
''' + KERNEL_CALL + "        self.cached = y\n        return y\n"
    result = pool.evaluate(task, candidate(body))
    assert result.status == Status.REJECTED and "stale-output" in result.error, result.feedback


def test_an_output_cached_by_input_address_is_caught(pool: EvalPool, task: Task) -> None:
    """Keyed by the input's address (a classic hack: the timed calls reuse their input buffers), the
    cache is right while a buffer keeps its values; the judge refills used slots with other values."""
    body = '''        self.calls = getattr(self, "calls", 0) + 1
        if not hasattr(self, "by_address"):
            self.by_address = {}
        key = x.data_ptr()
        if self.calls > 5 and key in self.by_address:
            return self.by_address[key]
''' + KERNEL_CALL + "        self.by_address[key] = y\n        return y\n"
    result = pool.evaluate(task, candidate(body))
    assert result.status == Status.REJECTED and "stale-output" in result.error, result.feedback


def test_work_finished_after_the_call_returns_is_caught(pool: EvalPool, task: Task) -> None:
    body = '''        self.calls = getattr(self, "calls", 0) + 1
        if self.calls <= 5:
''' + KERNEL_CALL.replace("        ", "            ") + '''            return y
        if not hasattr(self, "todo"):
            import queue
            self.todo = queue.Queue()
            def finish():
                while True:
                    x, y = self.todo.get()
                    time.sleep(0.0005)
                    lib.scaled_relu(x, y, x.numel(), self.scale)
            threading.Thread(target=finish, daemon=True).start()
        y = torch.zeros_like(x)
        self.todo.put((x, y))
        return y
'''
    result = pool.evaluate(task, candidate(body))
    assert result.status == Status.REJECTED and "stale-output" in result.error, result.feedback


@pytest.mark.skipif(not sampling_available(), reason="ptrace sampling is not permitted here")
def test_compute_left_to_numpy_is_caught_from_outside(pool: EvalPool) -> None:
    """The kernel is called (the in-process counter is satisfied) but numpy does the work: the judge's
    instruction-pointer samples put the time in numpy, not in the candidate's library."""
    task = Task(id="test/matmul", source='''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return a @ b

def get_inputs():
    return [torch.randn(256, 256), torch.randn(256, 256)]

def get_init_inputs():
    return []
''', rtol=1e-3, atol=1e-3)
    source = HEADER.format(kernel="void touch(const float* x, float* y, long n) { y[0] = x[0]; }").replace(
        '["scaled_relu"]', '["touch"]') + '''

class ModelNew(nn.Module):
    def forward(self, a, b):
        scratch = torch.empty(1)
        lib.touch(a, scratch, 1)
        return torch.from_numpy(a.numpy() @ b.numpy())
'''
    result = pool.evaluate(task, Candidate(source), EvalConfig(static_severity={"*": "warn"}))
    assert result.status == Status.REJECTED and "fallback-compute" in result.error, result.feedback
    assert result.coverage is not None and result.coverage["fraction"] < 0.2


def test_the_candidate_process_is_confined_and_pinned(pool: EvalPool, task: Task) -> None:
    body = '''        if not hasattr(self, "said"):
            status = open("/proc/self/status").read()
            print("SECCOMP", [l for l in status.splitlines() if l.startswith("Seccomp:")][0].split()[1])
            print("CPUS", len(os.sched_getaffinity(0)))
            try:
                os.sched_setaffinity(0, range(os.cpu_count()))
                print("SETAFFINITY allowed")
            except OSError:
                print("SETAFFINITY denied")
            try:
                os.kill(os.getppid(), 0)
                print("KILL allowed")
            except OSError:
                print("KILL denied")
            self.said = True
''' + KERNEL_CALL + "        return y\n"
    result = pool.evaluate(task, candidate(body))
    assert result.status == Status.OK, result.feedback
    out = result.output_tail
    assert "SECCOMP 2" in out and "CPUS 1" in out, out
    assert "SETAFFINITY denied" in out and "KILL denied" in out, out
    assert result.environment["confinement"]["seccomp"] is True


def test_nothing_the_candidate_starts_outlives_its_evaluation(pool: EvalPool, task: Task) -> None:
    """A double-forked grandchild (its parent exits, so it is no child of the candidate any more) that would
    sleep for a minute is gone once the evaluation is over."""
    marker = f"kernelrl-orphan-{os.getpid()}-{time.time_ns()}"
    body = f'''        if not hasattr(self, "said"):
            pid = os.fork()
            if pid == 0:
                if os.fork() == 0:
                    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "{marker}"])
                os._exit(0)
            os.waitpid(pid, 0)
            self.said = True
''' + KERNEL_CALL + "        return y\n"
    result = pool.evaluate(task, candidate(body), EvalConfig(static_severity={"*": "warn"}, guards=False))
    assert result.status == Status.OK, result.feedback
    deadline = time.monotonic() + 5
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(marker)


def _running(marker: str) -> list[int]:
    """Live processes whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                command = handle.read()
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in command and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def test_the_torch_compile_baseline_is_timed_in_the_gym(task: Task) -> None:
    """`compile_baseline`: the task's reference is compiled by Inductor in a confined child of its own (its
    precompiled headers exceed a candidate's file-size limit, which killed g++ before) and timed."""
    config = EvalConfig(compile_baseline=True, correctness_trials=1, timing_trials=5)
    with EvalPool(workers=1, config=config) as compiled_pool:
        result = compiled_pool.evaluate(task, Candidate(C.GOOD))
    assert result.status == Status.OK, result.error
    assert result.timing.compiled_reference_ms is not None and result.timing.compiled_reference_ms > 0
    assert result.timing.speedup_vs_compiled is not None


def test_timed_calls_change_their_input_set_every_call() -> None:
    """No request repeats a slot while there are enough, and no call holds the set of the call before it
    (across requests too) while another set is free: a kernel that reuses its last answer when its
    input looks unchanged is then wrong on any call the judge checks."""
    rng = random.Random(7)
    content = {f"x{j}": f"s{j % 3}" for j in range(12)}
    previous = ""
    for k in (1, 5, 12, 12, 3):
        order = changing_order(content, k, rng, previous)
        assert len(order) == k and len(set(order)) == k
        held = [previous, *(content[slot] for slot in order)] if previous else [content[slot] for slot in order]
        assert all(a != b for a, b in itertools.pairwise(held)), held
        previous = content[order[-1]]
    longer = [content[slot] for slot in changing_order(content, 30, rng)]  # more calls than slots: slots repeat
    assert len(longer) == 30 and all(a != b for a, b in itertools.pairwise(longer))
