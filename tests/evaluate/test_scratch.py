"""What trusted processes read on a candidate's behalf, and what outlives an evaluation.

The candidate's output is a file the supervisor owns and reads through its own fd, so a candidate that
replaces `.output` in its working directory with a link to a file it cannot read, a FIFO or /dev/zero
changes nothing. Each evaluation gets its own /tmp, /var/tmp and /dev/shm, gone with it, and every
process of a worker imports only from directories no candidate can write. Real pools, loopback only;
static checks warn only, so the process boundary itself is tested.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, Status
from kernelrl.evaluate.sandbox import _remove_owned, bwrap_available, trusted_import_path
from kernelrl.tasks import Task
from tests.evaluate import candidates as C

WAIVED = EvalConfig(static_severity={"*": "warn"}, timing_trials=5, timing_budget_s=0.2,
                    timeouts={"build": 120, "init": 20, "correctness": 20, "timing": 30})
SANDBOXES = ["none", *(["bwrap"] if bwrap_available() else [])]

CANDIDATE = '''
import json, os, sys
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp(r"""
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>
KERNEL
static bool done = false;
void act() {
    if (done) return;
    done = true;
    ACTION
}
""", ["scaled_relu", "act"])

PYTHON


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        lib.act()
        y = torch.empty_like(x)
        lib.scaled_relu(x, y, x.numel(), self.scale)
        return y
'''


def candidate(action: str = "", python: str = "") -> Candidate:
    return Candidate(CANDIDATE.replace("KERNEL", C.KERNEL).replace("ACTION", action).replace("PYTHON", python))


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(id="test/scaled_relu", source=C.RELU_TASK)


@pytest.fixture(scope="module", params=SANDBOXES)
def pool(request: pytest.FixtureRequest):
    with EvalPool(workers=1, config=WAIVED, sandbox=request.param) as pool:
        yield pool


@pytest.fixture(scope="module")
def secret() -> str:
    """A file in the build cache (visible inside bubblewrap) that only a process with capabilities reads:
    mode 0000, so neither the slot's uid nor a capability-less uid 0 can open it."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the supervisor must be able to read what the candidate cannot")
    path = Path(os.environ["KERNELRL_CACHE_DIR"], "secret-for-test")
    path.write_text("TOP-SECRET-7f3a\n" * 64)
    path.chmod(0)
    return str(path)


def shown(result) -> str:
    return "\n".join([result.error, result.feedback, result.output_tail, *result.notes,
                      *(s.message for s in result.stages)])


@pytest.mark.parametrize("kind", ["symlink-secret", "fifo", "dev-zero"])
def test_an_output_file_replaced_by_the_candidate_is_never_read(pool: EvalPool, task: Task, secret: str,
                                                                 kind: str) -> None:
    replace = {
        "symlink-secret": f'symlink("{secret}", ".output");',
        "fifo": 'mkfifo(".output", 0666);',
        "dev-zero": 'symlink("/dev/zero", ".output");',
    }[kind]
    action = f'printf("printed-before-replacing\\n"); fflush(stdout); unlink(".output"); {replace}'
    started = time.monotonic()
    result = pool.evaluate(task, candidate(action), WAIVED)
    assert result.status == Status.OK, result.error
    assert time.monotonic() - started < 60
    assert "printed-before-replacing" in result.output_tail
    assert "TOP-SECRET" not in shown(result)
    assert len(result.output_tail) < 5000


def test_a_chatty_honest_kernel_keeps_head_and_tail_only(pool: EvalPool, task: Task) -> None:
    action = 'for (int r = 0; r < 200000; ++r) printf("line %06d of honest progress output...........\\n", r);'
    result = pool.evaluate(task, candidate(action), WAIVED)
    assert result.status == Status.OK, result.error
    tail = result.output_tail
    assert tail.startswith("line 000000") and "line 199999" in tail and "bytes cut" in tail
    assert len(tail) < 5000


PLANT = '''
def plant():
    planted = []
    for directory in ("/tmp", "/var/tmp", "/dev/shm"):  # bubblewrap's /dev/shm is root's: not writable
        try:
            with open(os.path.join(directory, "planted_by_candidate.py"), "w") as handle:
                handle.write("PLANTED = True\\n" + "#" * (32 << 20 if directory == "/dev/shm" else 0))
            planted.append(directory)
        except PermissionError:
            pass
    print("PLANTED " + " ".join(planted), flush=True)


plant()
'''

REPORT = '''
import importlib.util
import stat


def report():
    seen = {d: sorted(os.listdir(d)) for d in ("/tmp", "/var/tmp", "/dev/shm") if os.path.isdir(d)}
    writable = [p for p in sys.path if not p or (os.path.isdir(p) and os.stat(p).st_mode & stat.S_IWOTH)]
    print("REPORT " + json.dumps({
        "seen": seen, "writable_path": writable, "cwd_on_path": os.getcwd() in sys.path,
        "importable": importlib.util.find_spec("planted_by_candidate") is not None,
        "python_path": os.environ.get("PYTHONPATH", ""),
    }), flush=True)


report()
'''


def report_of(result) -> dict:
    line = next(line for line in result.output_tail.splitlines() if line.startswith("REPORT "))
    return json.loads(line[len("REPORT "):])


def test_nothing_an_evaluation_writes_to_scratch_reaches_the_next(pool: EvalPool, task: Task) -> None:
    first = pool.evaluate(task, candidate(python=PLANT), WAIVED)
    assert first.status == Status.OK and "PLANTED /tmp /var/tmp" in first.output_tail, first.error
    second = pool.evaluate(task, candidate(python=REPORT), WAIVED)
    assert second.status == Status.OK, second.error
    report = report_of(second)
    assert not any("planted_by_candidate.py" in names for names in report["seen"].values()), report
    assert not report["importable"] and not report["cwd_on_path"] and report["writable_path"] == [], report
    assert not any(p in ("", "/tmp", ".") for p in report["python_path"].split(os.pathsep)), report
    if os.geteuid() == 0:  # root (inside bubblewrap or not) gets a mount namespace per evaluation
        assert not any("no private /tmp" in n for n in first.notes + second.notes), first.notes
        assert not any(name.startswith("planted_by_candidate") for name in os.listdir("/dev/shm"))


def test_scratch_space_is_fresh_size_limited_and_released(pool: EvalPool, task: Task) -> None:
    if os.geteuid() != 0:
        pytest.skip("a private /dev/shm needs root")
    fill = '''
def fill():
    written = 0
    block = b"z" * (1 << 20)
    try:
        for index in range(128):  # files of 16 MiB: one file may not pass the output limit (64 MiB)
            with open(f"/dev/shm/filler-{index}", "wb") as handle:
                for _ in range(16):
                    handle.write(block)
                    handle.flush()
                    written += 1
    except OSError:
        pass
    print(f"FILLED {written}", flush=True)


fill()
'''
    before = os.statvfs("/dev/shm")
    first = pool.evaluate(task, candidate(python=fill), WAIVED)
    assert first.status == Status.OK, first.error
    filled = int(next(w.split()[1] for w in first.output_tail.splitlines() if w.startswith("FILLED")))
    if pool.sandboxed:
        assert filled == 0  # bubblewrap's /dev/shm is root's, and its private copy keeps owner and mode
    else:
        assert 0 < filled < 2048  # it hit the private /dev/shm's limit, not the machine's
    assert not any(name.startswith("filler-") for name in os.listdir("/dev/shm"))
    after = os.statvfs("/dev/shm")
    assert after.f_bfree * after.f_frsize > before.f_bfree * before.f_frsize - (256 << 20)


def test_import_path_keeps_only_what_no_candidate_can_write(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    entries = ["", ".", "/tmp", "/dev/shm", str(private), str(shared), str(shared / "missing"), str(shared / "sub")]
    (shared / "sub").mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    assert trusted_import_path(entries) == [str(private), str(shared / "sub")]


def test_leftovers_of_the_candidate_uid_are_removed(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another uid")
    uid = 287654
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    mine = tmp_path / "root-owned"
    mine.write_text("stays")
    for path in (tmp_path / "planted", shared / "planted", tmp_path / "tree"):
        if path.name == "tree":
            (path / "deep").mkdir(parents=True)
            (path / "deep" / "f").write_text("x")
            for p in (path, path / "deep", path / "deep" / "f"):
                os.chown(p, uid, uid)
        else:
            path.write_text("x")
            os.chown(path, uid, uid)
    os.symlink("/etc/passwd", tmp_path / "link")
    os.chown(tmp_path / "link", uid, uid, follow_symlinks=False)
    assert _remove_owned(str(tmp_path), uid) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root-owned", "shared"]
    assert list(shared.iterdir()) == [] and mine.read_text() == "stays"
    assert stat.S_ISREG(os.stat("/etc/passwd").st_mode)
