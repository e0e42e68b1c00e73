"""Native builds go through the supervisor: candidates cannot poison the shared cache or wedge the service.

Real sandboxed pools, real compilers; the candidates below talk to the build channel the way an
exploit would (the static checks are waived so they get that far).
"""

from __future__ import annotations

import os
import secrets
import stat

import pytest

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, StageTimeouts, Status
from kernelrl.evaluate.sandbox import BUILD_UID_BASE, bwrap_available
from kernelrl.native.build import full_flags, library_path
from kernelrl.native.library import _with_wrappers
from kernelrl.native.signature import parse_function
from kernelrl.tasks import Task
from tests.evaluate import candidates as C

CONFIG = EvalConfig(
    static_severity={"*": "warn"},
    timing_trials=5,
    timing_budget_s=0.2,
    timeouts=StageTimeouts(build=60, init=10, correctness=10, timing=20),
)
needs_root_sandbox = pytest.mark.skipif(
    not bwrap_available() or os.geteuid() != 0, reason="uid separation needs bubblewrap and root"
)

# The victim's source is unique to this run, so no earlier test (the cache is shared by the session) built it.
VICTIM_KERNEL = C.KERNEL + f"// victim of the cache-poisoning test {secrets.token_hex(8)}\n"
VICTIM_GOOD = C.GOOD.replace(C.KERNEL, VICTIM_KERNEL)
assert VICTIM_GOOD != C.GOOD

PLANT = f'''
import os

import torch
import torch.nn as nn
from kernelrl.native import load_cpp
from kernelrl.native.build import full_flags, library_path
from kernelrl.native.library import _with_wrappers
from kernelrl.native.signature import parse_function

VICTIM = r"""{VICTIM_KERNEL}"""
EVIL = "void scaled_relu(const float* x, float* y, long n, float s) {{ for (long i = 0; i < n; ++i) y[i] = 0.f; }}"

evil = load_cpp(EVIL, ["scaled_relu"])
native = os.path.dirname(os.path.dirname(evil.path))


def victim_path():  # needs the cache's key
    return library_path(_with_wrappers(VICTIM, [parse_function(VICTIM, "scaled_relu")]), "c++", full_flags("c++"))


def plant(target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(evil.path, "rb") as src, open(target, "wb") as dst:
        dst.write(src.read())


for name, attack in [
    ("derive", lambda: plant(victim_path())),
    ("list", lambda: [os.listdir(os.path.join(native, d)) for d in os.listdir(native)]),  # other evaluations' libraries
    ("beside", lambda: plant(os.path.join(os.path.dirname(evil.path), "planted.so"))),
]:
    try:
        attack()
        print("ALLOWED", name)
    except OSError as exc:
        print("BLOCKED", name, exc)
        error = exc
raise error


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


def channel_candidate(action: str) -> str:
    """A candidate that does `action` (Python statements) with the build channel's fds at import time."""
    return f'''
import os
import torch.nn as nn
import kernelrl.native.build as build
from kernelrl.native import load_cpp

request_fd, reply_fd = build._BROKER.request_fd, build._BROKER.reply_fd
{action}
lib = load_cpp("void f(float* y) {{ y[0] = 1.f; }}", ["f"])


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(id="test/scaled_relu", source=C.RELU_TASK)


@pytest.fixture(scope="module")
def pool():
    with EvalPool(workers=2, config=CONFIG) as pool:
        yield pool


def victim_path() -> str:
    return str(library_path(_with_wrappers(VICTIM_KERNEL, [parse_function(VICTIM_KERNEL, "scaled_relu")]), "c++",
                            full_flags("c++")))


@needs_root_sandbox
def test_a_candidate_cannot_plant_a_library_under_another_sources_key(task: Task) -> None:
    with EvalPool(workers=2, config=CONFIG, sandbox="bwrap") as pool:
        # Before the victim is built (nothing under its key) and after (a cached library there).
        for victim_built in (False, True):
            attack = pool.evaluate(task, Candidate(PLANT))
            assert attack.status == Status.COMPILE_ERROR, attack.feedback
            assert "Permission denied" in attack.error, attack.feedback
            for name in ("derive", "list", "beside"):
                assert f"BLOCKED {name}" in attack.output_tail, attack.output_tail
            assert "ALLOWED" not in attack.output_tail
            assert os.path.exists(victim_path()) == victim_built
            victim = pool.evaluate(task, Candidate(VICTIM_GOOD))
            assert victim.status == Status.OK, victim.feedback
            assert victim.correctness.passed == victim.correctness.trials
            assert victim.kernel_calls["scaled_relu"] > 0
    info = os.stat(victim_path())
    assert info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) == 0o644
    assert stat.S_IMODE(os.stat(os.path.dirname(victim_path())).st_mode) == 0o711


@needs_root_sandbox
def test_the_compiler_runs_as_the_slots_build_uid_not_the_candidates(task: Task) -> None:
    # Two headers only root can read, one of them also the build uid of slot 0 (its owner).
    cache = os.environ["KERNELRL_CACHE_DIR"]
    headers = {"probe_build.h": BUILD_UID_BASE, "probe_root.h": 0}
    for name, owner in headers.items():
        path = os.path.join(cache, name)
        with open(path, "w") as handle:
            handle.write("#define PROBE 1\n")
        os.chown(path, owner, owner)
        os.chmod(path, 0o600)
    includes = "".join(f'#include "{name}"\n' for name in headers)  # found through -I (absolute paths are refused)
    source = C.GOOD.replace("void scaled_relu", includes + "void scaled_relu").replace(
        '["scaled_relu"])', f'["scaled_relu"], extra_flags=["-I{cache}"])')
    with EvalPool(workers=1, config=CONFIG, sandbox="bwrap") as pool:
        result = pool.evaluate(task, Candidate(source))
    assert result.status == Status.COMPILE_ERROR, result.feedback
    assert "probe_root.h" in result.error and "probe_build.h" not in result.error, result.error


def test_dangerous_compiler_flags_are_refused(pool: EvalPool, task: Task) -> None:
    for flag in ("-fplugin=/tmp/evil.so", "-B/tmp", "-Wl,-plugin,/tmp/x.so", "@/tmp/flags", "-specs=/tmp/s"):
        source = C.GOOD.replace('["scaled_relu"])', f'["scaled_relu"], extra_flags=[{flag!r}])')
        result = pool.evaluate(task, Candidate(source))
        assert result.status == Status.COMPILE_ERROR, result.feedback
        assert "is not allowed" in result.error, result.error
    assert pool.evaluate(task, Candidate(C.GOOD)).status == Status.OK


@pytest.mark.parametrize(
    ("action", "status", "needle"),
    [
        ('os.write(request_fd, b"\\xff\\x00 not json\\n"); os.read(reply_fd, 1)', Status.REJECTED, "malformed build request"),
        ('os.write(request_fd, b"[1, 2]\\n"); os.read(reply_fd, 1)', Status.REJECTED, "malformed build request"),
        ('os.write(request_fd, b\'{"source": 1, "language": "c++", "flags": []}\\n\'); os.read(reply_fd, 1)',
         Status.REJECTED, "malformed build request"),
        ('os.write(request_fd, b\'{"source": "", "language": "c++", "flags": [1]}\\n\'); os.read(reply_fd, 1)',
         Status.REJECTED, "malformed build request"),
        ("os.write(request_fd, b'x' * (5 * 2**20)); os.read(reply_fd, 1)", Status.REJECTED, "larger than"),
        ("os.close(reply_fd)", Status.COMPILE_ERROR, "Bad file descriptor"),
    ],
    ids=["garbage", "not-an-object", "wrong-types", "bad-flag-type", "oversized", "reply-closed"],
)
def test_malformed_build_requests_are_refused(pool: EvalPool, task: Task, action: str, status: Status, needle: str) -> None:
    result = pool.evaluate(task, Candidate(channel_candidate(action)))
    assert result.status == status, result.feedback
    assert needle in result.error, result.error
    good = pool.evaluate(task, Candidate(C.GOOD))
    assert good.status == Status.OK, good.feedback


def test_a_request_that_never_ends_times_out_the_build_stage(task: Task) -> None:
    config = EvalConfig.from_dict({**CONFIG.to_dict(), "timeouts": {"build": 3, "init": 10, "correctness": 10, "timing": 20}})
    with EvalPool(workers=1, config=config) as pool:
        result = pool.evaluate(task, Candidate(channel_candidate('os.write(request_fd, b\'{"source": "\'); os.read(reply_fd, 1)')))
        assert result.status == Status.TIMEOUT and "stage 'build'" in result.error, result.feedback
        good = pool.evaluate(task, Candidate(C.GOOD))
        assert good.status == Status.OK, good.feedback


def test_compiler_feedback_does_not_echo_a_file_the_kernel_includes(pool: EvalPool, task: Task) -> None:
    # The path comes from a macro, so the textual include check passes it: the log filter must catch it.
    source = C.GOOD.replace("void scaled_relu", '#define LEAK "/etc/passwd"\n#include LEAK\nvoid scaled_relu')
    result = pool.evaluate(task, Candidate(source))
    assert result.status == Status.COMPILE_ERROR, result.feedback
    with open("/etc/passwd") as handle:
        first = handle.readline().strip()
    assert first not in result.feedback and first.split(":")[0] + ":" not in result.feedback, result.feedback
    assert "in other files omitted (e.g. /etc/passwd:1)" in result.error, result.error
