"""Outputs the candidate describes: the call's reply says where its outputs are, the judge stops the
candidate the moment that reply arrives and reads them before it runs again. Real candidate processes:
a forked runner served over a socketpair (the judge's side is this test), and full evaluations in a pool.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest
import torch

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, Status
from kernelrl.evaluate.candidate_client import (
    MAX_OUTPUT_DEPTH,
    CandidateProcess,
    StageFailed,
    check_descriptions,
)
from kernelrl.evaluate.candidate_server import Runner
from kernelrl.evaluate.confine import make_subreaper
from kernelrl.evaluate.exchange import Channel, parse_message
from kernelrl.evaluate.sampler import PcSampler, sampling_available
from kernelrl.tasks import Task
from tests.evaluate import candidates as C

# A thread released by the reply itself (the runner's send) writes the output 20 ms later: it must never
# get to, since the candidate is stopped from the reply until the judge's next request.
LATE_WRITER = '''
import threading, time
import torch, torch.nn as nn
from kernelrl.evaluate import candidate_server as runner

RELEASE = threading.Event()
PENDING = []
original_send = runner.Channel.send

def send(self, message, fds=None):
    RELEASE.set()
    return original_send(self, message, fds)

runner.Channel.send = send

def late():
    while True:
        RELEASE.wait()
        RELEASE.clear()
        jobs = PENDING[:]
        PENDING.clear()
        time.sleep(0.02)
        for y in jobs:
            y.fill_(7.0)

threading.Thread(target=late, daemon=True).start()

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.zeros_like(x)
        PENDING.append(y)
        return y
'''


@pytest.fixture
def candidate_process() -> Iterator[CandidateProcess]:
    """A runner in a forked process of its own group (the judge's layout, without the confinement)."""
    judge_end, candidate_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            judge_end.close()
            Runner(Channel(candidate_end), "cpu", "cpu", False).serve()
        finally:
            os._exit(0)
    candidate_end.close()
    process = CandidateProcess(pid, Channel(judge_end), str, 1 << 30)
    try:
        yield process
    finally:
        os.killpg(pid, 9)
        os.waitpid(pid, 0)


def start(process: CandidateProcess, source: str, x: torch.Tensor) -> None:
    process.request({"op": "load", "source": source})
    process.send_arena("init", {}, {})
    process.request({"op": "init", "arena": "init", "init_inputs": [], "seed": 0, "state": {}})
    process.send_inputs("trial", {"a": [x]})


def thread_states(pid: int) -> set[str]:
    states = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as handle:
            states.add(handle.read().rsplit(")", 1)[1].split()[0])
    return states


def test_the_candidate_is_stopped_from_a_calls_reply_until_the_next_request(candidate_process: CandidateProcess) -> None:
    x = torch.randn(64, 32)
    start(candidate_process, LATE_WRITER, x)
    candidate_process.request({"op": "call", "sets": ["a"]})
    assert thread_states(candidate_process.pid) == {"T"}
    time.sleep(0.05)  # the late writer would have written by now, were the candidate running
    assert torch.equal(candidate_process.read_outputs([0])[0], torch.zeros(64, 32))
    candidate_process.request({"op": "counters"})
    assert "T" not in thread_states(candidate_process.pid)


@pytest.mark.skipif(not sampling_available(), reason="ptrace sampling is not permitted here")
def test_the_stop_holds_while_a_ptrace_sampler_traces_the_candidate(candidate_process: CandidateProcess) -> None:
    """A tracer may resume a thread from its own stops: the judge holds the sampler while the candidate is
    stopped (its stops kept), so no thread is seen running between the reply and the next request, and
    sampling goes on."""
    x = torch.randn(64, 32)
    start(candidate_process, LATE_WRITER, x)
    sampler = PcSampler(candidate_process.pid, hz=1000)
    sampler.start()
    candidate_process.tracer = sampler  # as the judge does for a ptrace sampler
    try:
        for _ in range(20):
            candidate_process.request({"op": "call", "sets": ["a"]})
            assert thread_states(candidate_process.pid) <= {"T", "t"}
            time.sleep(0.03)
            assert torch.equal(candidate_process.read_outputs([0])[0], torch.zeros(64, 32))
        candidate_process.request({"op": "counters"})
    finally:
        candidate_process.tracer = None
        samples = sampler.stop()
    assert samples.error is None and samples.total > 0
    candidate_process.request({"op": "call", "sets": ["a"]})  # after the tracer left, waitpid again
    assert thread_states(candidate_process.pid) == {"T"}


SELF_CONTINUING_CHILD = '''
import os, signal
import torch.nn as nn

CHILD = os.fork()
if CHILD == 0:
    while True:  # a SIGCONT it sends itself discards a SIGSTOP still pending: it tries to run through the stop
        os.kill(os.getpid(), signal.SIGCONT)

class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
'''


def test_a_call_never_returns_while_a_process_the_candidate_forked_still_runs(candidate_process: CandidateProcess) -> None:
    start(candidate_process, SELF_CONTINUING_CHILD, torch.randn(4))
    with open(f"/proc/{candidate_process.pid}/task/{candidate_process.pid}/children") as handle:
        child = int(handle.read().split()[0])
    for _ in range(20):
        try:
            candidate_process.request({"op": "call", "sets": ["a"]})
        except StageFailed as failure:
            assert failure.status == Status.REJECTED and "[unstoppable]" in failure.message
            return
        assert thread_states(child) == {"T"} and thread_states(candidate_process.pid) == {"T"}


ORPHAN_CONTINUER = '''
import os, signal
import torch.nn as nn

if os.fork() == 0:
    if os.fork() == 0:  # an orphan once its parent exits: no descendant of the candidate any more
        while True:
            os.kill(os.getpid(), signal.SIGCONT)
    os._exit(0)
os.wait()

class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
'''


def _orphan_scenario() -> None:
    """As the judge (a child subreaper): every call ends with the orphan stopped too, or is refused."""
    make_subreaper()
    judge_end, candidate_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        judge_end.close()
        Runner(Channel(candidate_end), "cpu", "cpu", False).serve()
        os._exit(0)
    candidate_end.close()
    process = CandidateProcess(pid, Channel(judge_end), str, 1 << 30)
    try:
        start(process, ORPHAN_CONTINUER, torch.randn(4))
        deadline = time.monotonic() + 5
        orphans: list[int] = []
        while not orphans and time.monotonic() < deadline:
            with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as handle:
                orphans = [int(c) for c in handle.read().split() if int(c) != pid]
        assert orphans, "the orphan did not re-parent to the subreaper"
        for _ in range(20):
            try:
                process.request({"op": "call", "sets": ["a"]})
            except StageFailed as failure:
                assert failure.status == Status.REJECTED and "[unstoppable]" in failure.message
                return
            assert thread_states(orphans[0]) == {"T"}, thread_states(orphans[0])
    finally:
        os.killpg(pid, 9)


def test_an_orphan_of_the_candidate_is_stopped_with_it_or_the_call_is_refused() -> None:
    """A double-forked orphan re-parents to the judge, not to the candidate: the stop after each reply
    waits for the processes of the candidate's group that the judge inherited as well."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            _orphan_scenario()
            os.write(write_end, b"ok")
        except BaseException as exc:  # reported to the test below
            os.write(write_end, repr(exc).encode()[:2000])
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        outcome = handle.read().decode()
    os.waitpid(child, 0)
    assert outcome == "ok", outcome


def test_outputs_are_described_in_the_calls_own_reply(candidate_process: CandidateProcess) -> None:
    source = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return (x * 2).t()\n"
    x = torch.randn(8, 5)
    start(candidate_process, source, x)
    reply = candidate_process.request({"op": "call", "sets": ["a", "a"]})
    assert len(reply["outputs"]) == 2 and reply["outputs"][0]["strides"] == [8, 1]  # a contiguous copy of the view
    assert torch.equal(candidate_process.read_outputs([1])[0], (x * 2).t())


def test_a_tensor_subclass_output_is_refused_with_what_to_return(candidate_process: CandidateProcess) -> None:
    source = '''
import torch, torch.nn as nn
class Lazy(torch.Tensor):
    pass
class ModelNew(nn.Module):
    def forward(self, x):
        return (x * 2).as_subclass(Lazy)
'''
    start(candidate_process, source, torch.randn(4))
    candidate_process.request({"op": "call", "sets": ["a"]})
    with pytest.raises(StageFailed) as failure:
        candidate_process.read_outputs([0])
    assert failure.value.status == Status.REJECTED and "[output-type]" in failure.value.message
    assert "Lazy" in failure.value.message and "plain torch.Tensor" in failure.value.message


def test_one_buffer_returned_by_every_call_says_to_allocate_per_call(candidate_process: CandidateProcess) -> None:
    source = '''
import torch, torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        if not hasattr(self, "out"):
            self.out = torch.empty_like(x)
        return torch.mul(x, 2, out=self.out)
'''
    start(candidate_process, source, torch.randn(16))
    candidate_process.request({"op": "call", "sets": ["a", "a", "a"]})
    with pytest.raises(StageFailed) as failure:
        candidate_process.describe([0])
    assert "allocate the output per call" in failure.value.message and "calls 1 and 2" in failure.value.message


# -- descriptions are untrusted: checked before anything is read or allocated -------------------------

def tensor(address: int, shape: list[int], nbytes: int, strides: list[int] | None = None) -> dict:
    desc: dict = {"tensor": [address, shape, "float32", nbytes]}
    if strides is not None:
        desc["strides"] = strides
    return desc


@pytest.mark.parametrize("outputs, calls, reason", [
    ([tensor(4096, [4], 16)], 2, "forged-message"),  # one description for two calls
    ([tensor(4096, [-1, -4], 16)], 1, "forged-message"),  # negative sizes whose product looks right
    ([tensor(4096, [1 << 40], 1 << 42)], 1, "forged-message"),  # larger than the judge reads
    ([tensor(4096, [4], 17)], 1, "forged-message"),  # bytes that do not match the shape
    ([tensor(-8, [4], 16)], 1, "forged-message"),
    ([{"list": [tensor(4096 + 64 * i, [4], 16) for i in range(1 << 15)]}], 1, "forged-message"),  # too many leaves
    ([{"list": [tensor(4096, [4 << 20], 16 << 20)] * 80}], 1, "forged-message"),  # over the total byte budget
    ([tensor(4096, [4, 4], 64, [1, 4])], 1, "output-layout"),  # a strided layout the runner never sends
    ([{"subclass": "LazyOutput"}], 1, "output-type"),
    ([tensor(4096, [4], 16), tensor(4104, [4], 16)], 2, "stale-output"),  # two calls share memory
])
def test_forged_descriptions_are_refused(outputs: list, calls: int, reason: str) -> None:
    with pytest.raises(StageFailed) as failure:
        check_descriptions(outputs, calls, 1 << 30)
    assert failure.value.status == Status.REJECTED and f"[{reason}]" in failure.value.message


def test_deep_nesting_is_refused_not_crashed() -> None:
    nested: dict = tensor(4096, [4], 16)
    for _ in range(MAX_OUTPUT_DEPTH + 2):
        nested = {"list": [nested]}
    with pytest.raises(StageFailed):
        check_descriptions([nested], 1, 1 << 30)
    with pytest.raises(ValueError):
        parse_message(b"[" * 200_000 + b"]" * 200_000)


def test_honest_descriptions_pass() -> None:
    same_call = {"list": [tensor(4096, [4], 16), tensor(4096, [4], 16)]}  # (y, y): one call may alias itself
    size_one_dims = tensor(8192, [4, 1], 16, [1, 4])  # strides of size-1 dimensions do not matter
    empty = tensor(0, [0, 3], 0, [3, 1])
    outputs = [same_call, size_one_dims, empty, {"value": 3}]
    assert check_descriptions(outputs, 4, 1 << 30) == outputs


# -- whole evaluations --------------------------------------------------------------------------------

WAIVED = EvalConfig(static_severity={"*": "warn"}, timing_trials=10, timing_budget_s=0.3)


@pytest.fixture(scope="module")
def pool() -> Iterator[EvalPool]:
    with EvalPool(workers=1, config=WAIVED) as pool:
        yield pool


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(id="test/scaled_relu", source=C.RELU_TASK.replace("n = 4096", "n = 1 << 16"))


REPLY_EARLY = f'''
import queue, threading
import torch, torch.nn as nn
from kernelrl.evaluate import candidate_server as runner
from kernelrl.native import load_cpp

lib = load_cpp(r"""{C.KERNEL}""", ["scaled_relu"])
WORK, TIMED = queue.Queue(), [False]

def worker():
    while True:
        x, y, s = WORK.get()
        lib.scaled_relu(x, y, x.numel(), s)
        WORK.task_done()

threading.Thread(target=worker, daemon=True).start()
original_call = runner.Runner.op_call

def op_call(self, request):
    WORK.join()
    TIMED[0] = not request.get("count")
    return original_call(self, request)

runner.Runner.op_call = op_call

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        if TIMED[0]:
            WORK.put((x, y, self.scale))
        else:
            lib.scaled_relu(x, y, x.numel(), self.scale)
        return y
'''

STD_THREAD_ROWS = '''
import torch, torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp(r"""
#include <thread>
#include <vector>
void scaled_relu(const float* x, float* y, long n, float s, long workers) {
    std::vector<std::thread> pool;
    for (long w = 0; w < workers; ++w)
        pool.emplace_back([=] { for (long i = n * w / workers; i < n * (w + 1) / workers; ++i) y[i] = (x[i] > 0 ? x[i] : 0) * s; });
    for (auto& t : pool) t.join();
}
""", ["scaled_relu"])

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        lib.scaled_relu(x.contiguous(), y, x.numel(), self.scale, 3)
        return y
'''


def test_a_server_patched_to_reply_before_the_work_is_done_is_caught(pool: EvalPool, task: Task) -> None:
    result = pool.evaluate(task, Candidate(REPLY_EARLY))
    assert result.status in (Status.REJECTED, Status.INCORRECT) and "stale-output" in result.error, result.feedback


def test_a_kernel_that_joins_its_std_threads_passes_under_the_default_policy() -> None:
    # 1M elements, so that each thread computes for well over the untimed profile's 50 us period: perf's
    # period restarts in every new thread, and on 64k elements three threads of ~10 us each were never
    # sampled, leaving only the forward's calls into torch (`empty_like`, `contiguous`) in the profile
    # (`test_perf_sampler.test_the_untimed_profile_sees_threads_shorter_than_the_timed_period`).
    task = Task(id="test/scaled_relu_1m", source=C.RELU_TASK.replace("n = 4096", "n = 1 << 20"))
    with EvalPool(workers=1) as strict:
        result = strict.evaluate(task, Candidate(STD_THREAD_ROWS))
    assert result.status == Status.OK, result.feedback
