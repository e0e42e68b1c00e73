"""The candidate seccomp filter and the judge's process-hygiene helpers, on real processes.

Every check runs in forked processes: a disposable "judge" (so nothing is aimed at the test runner) and
below it a "candidate" that installs the filter the way an evaluation child would (its own process
group first, then `install_seccomp`). Results come back as one JSON line over a pipe.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelrl.evaluate import confine
from kernelrl.evaluate.confine import (
    cpus_for_slot,
    install_seccomp,
    kill_descendants,
    kill_uid,
    make_subreaper,
    make_undumpable,
    reap_zombies,
    set_affinity,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux" or isinstance(confine.native_arch(), str),
                                reason="seccomp filter needs Linux on x86_64 or aarch64")
SRC = str(Path(confine.__file__).resolve().parents[2])
X86 = platform.machine() == "x86_64"
NR = confine.ARCHES.get(platform.machine(), confine.ARCHES["x86_64"]).numbers
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long
UNPRIVILEGED = 54321  # uids with no processes of their own on a test machine
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch uids")


def in_fork(fn: Callable[[], Any], timeout: float = 60) -> Any:
    """Run `fn` in a forked process and return its result (JSON); its exception is raised here."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                out = {"value": fn()}
            except BaseException:
                out = {"error": traceback.format_exc()}
            os.write(w, json.dumps(out).encode() + b"\n")
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while not data.endswith(b"\n"):  # not EOF: grandchildren may hold the pipe
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise TimeoutError(f"forked check did not answer in {timeout}s")
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not data:
        raise RuntimeError("forked check died without an answer")
    out = json.loads(data)
    if "error" in out:
        raise AssertionError("in the forked process:\n" + out["error"])
    return out["value"]


def confine_me(own_pid: int | None = None) -> None:
    """What an evaluation child does before candidate code runs."""
    os.setpgid(0, 0)
    reason = install_seccomp(own_pid)
    assert reason is None, reason


def err(call: Callable[[], Any]) -> int:
    """0 if the call worked, else its errno."""
    try:
        call()
    except OSError as exc:
        return exc.errno
    return 0


def raw(name: str | int, *args: int) -> int:
    """A raw syscall by name or number: 0 (or a positive result) becomes 0, a failure its errno."""
    nr = NR[name] if isinstance(name, str) else name
    rc = LIBC.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return ctypes.get_errno() if rc < 0 else 0


def dead(pid: int, timeout: float = 5.0) -> bool:
    """Whether `pid` has exited (gone or a zombie) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = confine._stat(pid)
        if stat is None or stat[1] in ("Z", "X"):
            return True
        time.sleep(0.01)
    return False


def sleeper() -> int:
    """Fork a child that sleeps until killed."""
    pid = os.fork()
    if pid == 0:
        try:
            while True:
                time.sleep(1)
        finally:
            os._exit(0)
    return pid


def test_filter_is_installed_on_every_thread() -> None:
    def candidate() -> dict[str, Any]:
        go, done = threading.Event(), {}

        def early_thread() -> None:  # started before the filter: TSYNC must reach it too
            go.wait()
            done["setsid"] = err(os.setsid)
            done["status"] = Path("/proc/thread-self/status").read_text()

        thread = threading.Thread(target=early_thread)
        thread.start()
        confine_me()
        go.set()
        thread.join()
        status = Path("/proc/self/status").read_text()
        return {"thread_setsid": done["setsid"], "thread_mode": "Seccomp:\t2" in done["status"],
                "mode": "Seccomp:\t2" in status, "filters": "Seccomp_filters:\t1" in status}

    assert in_fork(candidate) == {"thread_setsid": errno.EPERM, "thread_mode": True, "mode": True, "filters": True}


def test_ptrace_and_memory_of_the_judge_are_out_of_reach() -> None:
    def judge() -> dict[str, int]:
        parent = os.getpid()

        def candidate() -> dict[str, int]:
            confine_me()
            LIBC.ptrace.restype = ctypes.c_long
            attach = LIBC.ptrace(ctypes.c_long(16), ctypes.c_long(parent), None, None)  # PTRACE_ATTACH
            return {"ptrace": ctypes.get_errno() if attach < 0 else 0,
                    "process_vm_readv": raw("process_vm_readv", parent, 0, 0, 0, 0, 0),
                    "kcmp": raw("kcmp", parent, os.getpid(), 0, 0, 0),
                    "pidfd_getfd": err(lambda: raw_or_raise("pidfd_getfd", os.pidfd_open(parent), 0, 0))}

        return in_fork(candidate)

    assert in_fork(judge) == {"ptrace": errno.EPERM, "process_vm_readv": errno.EPERM, "kcmp": errno.EPERM,
                              "pidfd_getfd": errno.EPERM}


def raw_or_raise(name: str, *args: int) -> None:
    code = raw(name, *args)
    if code:
        raise OSError(code, os.strerror(code))


def test_signals_reach_only_the_candidate_itself() -> None:
    def judge() -> dict[str, Any]:
        parent, sibling = os.getpid(), sleeper()

        def candidate() -> dict[str, int]:
            confine_me()
            own, tid = os.getpid(), threading.get_native_id()
            return {
                "kill judge": err(lambda: os.kill(parent, 0)),
                "kill sibling": err(lambda: os.kill(sibling, signal.SIGKILL)),
                "kill all": err(lambda: os.kill(-1, 0)),
                "kill group by -pid": err(lambda: os.kill(-own, 0)),
                "kill self": err(lambda: os.kill(own, 0)),
                "kill own group (0)": err(lambda: os.kill(0, 0)),
                "kill self, high half set": raw("kill", (1 << 32) | own, 0),
                "tgkill self": raw("tgkill", own, tid, 0),
                "tgkill judge": raw("tgkill", parent, parent, 0),
                "tkill judge": raw("tkill", parent, 0),
                "sigqueue judge": raw("rt_sigqueueinfo", parent, 0, 0),
                "tgsigqueue judge": raw("rt_tgsigqueueinfo", parent, parent, 0, 0),
                "pidfd signal judge": err(lambda: signal.pidfd_send_signal(os.pidfd_open(parent), 0)),
                "pthread_kill self": err(lambda: signal.pthread_kill(threading.get_ident(), 0)),
            }

        result = in_fork(candidate)
        alive = not dead(sibling, timeout=0.2)
        os.kill(sibling, signal.SIGKILL)
        os.waitpid(sibling, 0)
        return {"result": result, "sibling alive": alive}

    out = in_fork(judge)
    assert out["sibling alive"]
    denied = errno.EPERM
    assert out["result"] == {
        "kill judge": denied, "kill sibling": denied, "kill all": denied, "kill group by -pid": denied,
        "kill self": 0, "kill own group (0)": 0, "kill self, high half set": denied, "tgkill self": 0,
        "tgkill judge": denied, "tkill judge": denied, "sigqueue judge": denied, "tgsigqueue judge": denied,
        "pidfd signal judge": denied, "pthread_kill self": 0,
    }


def test_scheduling_of_other_processes_is_denied() -> None:
    def judge() -> dict[str, int]:
        parent = os.getpid()

        def candidate() -> dict[str, int]:
            confine_me()
            own = os.getpid()
            limits = resource.getrlimit(resource.RLIMIT_NOFILE)
            param = os.sched_param(0)
            best_effort_4 = (2 << 13) | 4
            return {
                "setpriority judge": err(lambda: os.setpriority(os.PRIO_PROCESS, parent, 10)),
                "setpriority self (0)": err(lambda: os.setpriority(os.PRIO_PROCESS, 0, 5)),
                "setpriority self (pid)": err(lambda: os.setpriority(os.PRIO_PROCESS, own, 6)),
                "setpriority own group": err(lambda: os.setpriority(os.PRIO_PGRP, 0, 7)),
                "setpriority own user": err(lambda: os.setpriority(os.PRIO_USER, 0, 7)),
                "getpriority judge": err(lambda: os.getpriority(os.PRIO_PROCESS, parent)),
                "prlimit read judge": err(lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE)),
                "prlimit write judge": err(lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE, limits)),
                "prlimit write self (0)": err(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, limits)),
                "prlimit write self (pid)": err(lambda: resource.prlimit(own, resource.RLIMIT_NOFILE, limits)),
                "setscheduler judge": err(lambda: os.sched_setscheduler(parent, os.SCHED_OTHER, param)),
                "setscheduler self": err(lambda: os.sched_setscheduler(own, os.SCHED_OTHER, param)),
                "setparam judge": err(lambda: os.sched_setparam(parent, param)),
                "setparam self": err(lambda: os.sched_setparam(0, param)),
                "ioprio_set judge": raw("ioprio_set", 1, parent, best_effort_4),
                "ioprio_set self": raw("ioprio_set", 1, 0, best_effort_4),
                "ioprio_set user": raw("ioprio_set", 3, 0, best_effort_4),
                "move_pages judge": raw("move_pages", parent, 0, 0, 0, 0, 0),
                "move_pages self": raw("move_pages", 0, 0, 0, 0, 0, 0),
                "migrate_pages judge": raw("migrate_pages", parent, 0, 0, 0),
                "sched_setattr judge": raw("sched_setattr", parent, 0, 0),
                "setaffinity self": err(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))),
                "getaffinity self": err(lambda: os.sched_getaffinity(0)),
            }

        return in_fork(candidate)

    out = in_fork(judge)
    denied = {k for k, v in out.items() if v == errno.EPERM}
    assert denied == {"setpriority judge", "setpriority own group", "setpriority own user", "prlimit write judge",
                      "setscheduler judge", "setparam judge", "ioprio_set judge", "ioprio_set user",
                      "move_pages judge", "migrate_pages judge", "sched_setattr judge", "setaffinity self"}, out
    assert all(v == 0 for k, v in out.items() if k not in denied), out


def test_only_unix_sockets() -> None:
    def candidate() -> dict[str, int]:
        confine_me()

        def make(family: int, kind: int = socket.SOCK_STREAM) -> Callable[[], None]:
            return lambda: socket.socket(family, kind).close()

        return {
            "inet": err(make(socket.AF_INET)), "inet6": err(make(socket.AF_INET6)),
            "udp": err(make(socket.AF_INET, socket.SOCK_DGRAM)),
            "netlink": err(make(socket.AF_NETLINK, socket.SOCK_RAW)),
            "unix": err(make(socket.AF_UNIX)), "unix dgram": err(make(socket.AF_UNIX, socket.SOCK_DGRAM)),
            "socketpair": err(lambda: [s.close() for s in socket.socketpair()]),
        }

    assert in_fork(candidate) == {"inet": errno.EPERM, "inet6": errno.EPERM, "udp": errno.EPERM,
                                  "netlink": errno.EPERM, "unix": 0, "unix dgram": 0, "socketpair": 0}


def test_perf_events_on_the_candidate_cannot_be_switched_off() -> None:
    """prctl(PR_TASK_PERF_EVENTS_DISABLE/ENABLE) are denied (defence in depth: the kernel applies them to the
    caller's own events, not the judge's); other prctl options work."""

    def candidate() -> dict[str, int]:
        confine_me()
        return {"perf disable": raw("prctl", 31, 0, 0, 0, 0), "perf enable": raw("prctl", 32, 0, 0, 0, 0),
                "get name": raw("prctl", 16, ctypes.addressof(ctypes.create_string_buffer(16)), 0, 0, 0)}

    assert in_fork(candidate) == {"perf disable": errno.EPERM, "perf enable": errno.EPERM, "get name": 0}


def test_no_namespaces_and_clone3_falls_back() -> None:
    def candidate() -> dict[str, int]:
        confine_me()

        def clone(flags: int) -> int:
            rc = LIBC.syscall(ctypes.c_long(NR["clone"]), ctypes.c_long(flags | signal.SIGCHLD), *[ctypes.c_long(0)] * 4)
            if rc == 0:
                os._exit(0)  # the filter let it through: the test fails on the 0 below
            if rc > 0:
                os.waitpid(rc, 0)
                return 0
            return ctypes.get_errno()

        def fork_and_wait() -> None:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)

        return {
            "clone newnet": clone(0x40000000), "clone newuser": clone(0x10000000), "clone newpid": clone(0x20000000),
            "unshare newns": raw("unshare", 0x00020000), "setns": raw("setns", 0, 0),
            "clone3": raw("clone3", 0, 0), "fork": err(fork_and_wait), "plain clone": clone(0),
            "thread": err(lambda: threading.Thread(target=lambda: None).start()),
        }

    assert in_fork(candidate) == {"clone newnet": errno.EPERM, "clone newuser": errno.EPERM,
                                  "clone newpid": errno.EPERM, "unshare newns": errno.EPERM,
                                  "setns": errno.EPERM, "clone3": errno.ENOSYS, "fork": 0, "plain clone": 0,
                                  "thread": 0}


def test_every_denied_call_is_stopped_by_the_filter() -> None:
    """With a distinctive errno the filter, not the kernel, is seen to refuse each call (harmless args)."""
    marker = errno.ENOTRECOVERABLE  # no syscall here returns it on its own

    def candidate() -> dict[str, int]:
        arch = confine.native_arch()
        assert not isinstance(arch, str)
        assert confine.install_filter(confine.filter_program(arch, os.getpid(), marker), arch) is None
        out = {name: raw(name, -1, -1, -1, -1, -1, -1) for name in confine.DENIED if name in NR}
        if X86:
            out["x32 getpid"] = raw(0x40000000 | 39)
        out["getpid"] = raw(39 if X86 else 172)
        return out

    out = in_fork(candidate)
    assert out.pop("getpid") == 0
    assert {name: code for name, code in out.items() if code != marker} == {}
    assert len(out) >= len(confine.DENIED) - 2


@pytest.mark.skipif(not X86 or shutil.which("gcc") is None, reason="int 0x80 needs x86_64 and gcc")
def test_i386_syscalls_are_denied(tmp_path: Path) -> None:
    source = tmp_path / "int80.c"
    source.write_text(textwrap.dedent("""
        #include <stdio.h>
        int main(void) {
            long ret;
            __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20) : "memory");  /* i386 getpid */
            printf("%ld\\n", ret);
            return 0;
        }
    """))
    exe = tmp_path / "int80"
    subprocess.run(["gcc", "-O0", str(source), "-o", str(exe)], check=True, capture_output=True)
    control = subprocess.run([str(exe)], capture_output=True, text=True)
    if control.returncode != 0 or int(control.stdout) <= 0:
        pytest.skip("this kernel runs no i386 syscalls (no IA32 emulation)")

    def candidate() -> str:
        confine_me()
        return subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip()

    assert in_fork(candidate) == str(-errno.EPERM)


def test_compilers_run_and_grandchildren_inherit_the_filter(tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("no g++")

    def candidate() -> dict[str, Any]:
        confine_me()
        own = os.getpid()
        version = subprocess.run(["g++", "--version"], capture_output=True, text=True)
        exe = str(tmp_path / "seven")
        build = subprocess.run(["g++", "-x", "c++", "-", "-o", exe], input="int main() { return 7; }",
                               capture_output=True, text=True)
        ran = subprocess.run([exe]).returncode if build.returncode == 0 else None
        probe = textwrap.dedent(f"""
            import json, os
            def err(call):
                try:
                    call()
                except OSError as exc:
                    return exc.errno
                return 0
            print(json.dumps({{
                "filtered": "Seccomp:\\t2" in open("/proc/self/status").read(),
                "setsid": err(os.setsid),
                "kill candidate": err(lambda: os.kill({own}, 0)),
                "kill self by pid": err(lambda: os.kill(os.getpid(), 0)),
                "kill own group": err(lambda: os.kill(0, 0)),
            }}))
        """)
        grandchild = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        return {"version": version.returncode, "build": build.returncode, "ran": ran,
                "grandchild": json.loads(grandchild.stdout or "null"), "stderr": grandchild.stderr}

    out = in_fork(candidate)
    assert (out["version"], out["build"], out["ran"]) == (0, 0, 7), out
    assert out["grandchild"] == {"filtered": True, "setsid": errno.EPERM, "kill candidate": 0,
                                 "kill self by pid": errno.EPERM, "kill own group": 0}, out


def test_ninja_builds_under_the_filter(tmp_path: Path) -> None:
    """torch's load_inline runs ninja, which spawns each compiler with setpgid: that must keep working."""
    if shutil.which("ninja") is None or shutil.which("g++") is None:
        pytest.skip("no ninja or g++")
    (tmp_path / "a.cpp").write_text("int f() { return 1; }\n")
    (tmp_path / "build.ninja").write_text("rule cc\n  command = g++ -c $in -o $out\nbuild a.o: cc a.cpp\n")

    def candidate() -> dict[str, Any]:
        confine_me()
        group = os.getpgrp()
        build = subprocess.run(["ninja", "-C", str(tmp_path)], capture_output=True, text=True)
        return {"rc": build.returncode, "log": build.stdout + build.stderr, "setpgid": err(lambda: os.setpgid(0, 0)),
                "still in group": os.getpgrp() == group}

    out = in_fork(candidate)
    assert out["rc"] == 0, out["log"]
    assert (tmp_path / "a.o").exists()
    assert out["setpgid"] == 0 and out["still in group"]


def test_a_daemon_cannot_leave_the_process_group() -> None:
    def judge() -> dict[str, Any]:
        make_subreaper()  # the orphaned daemon becomes this process's child, so its death can be seen

        def candidate() -> dict[str, Any]:
            confine_me()
            r, w = os.pipe()
            first = os.fork()
            if first == 0:  # the classic daemon: fork, setsid, fork again, parent exits
                try:
                    setsid = err(os.setsid)
                    daemon = sleeper()
                    os.write(w, json.dumps([setsid, daemon]).encode() + b"\n")
                finally:
                    os._exit(0)
            os.waitpid(first, 0)
            setsid, daemon = json.loads(os.read(r, 1024))
            return {"candidate": os.getpid(), "setsid": setsid, "daemon": daemon, "daemon group": os.getpgid(daemon)}

        try:
            out = in_fork(candidate)
            try:
                os.killpg(out["candidate"], signal.SIGKILL)  # the judge's kill after the candidate is gone
            except ProcessLookupError:
                pass  # nobody left in the group: the daemon escaped it
            out["daemon killed"] = dead(out["daemon"])
            return out
        finally:  # whatever happened, no daemon outlives the test (it would hold the runner's pipes)
            kill_descendants()
            reap_zombies()

    out = in_fork(judge)
    assert out["setsid"] == errno.EPERM
    assert out["daemon group"] == out["candidate"]
    assert out["daemon killed"]


def test_kill_descendants_finds_orphans_under_a_subreaper() -> None:
    def judge(subreaper: bool) -> dict[str, Any]:
        if subreaper:
            make_subreaper()

        def candidate() -> list[int]:  # leaves a chain of two sleepers behind and exits
            confine_me()
            r, w = os.pipe()
            first = os.fork()
            if first == 0:
                try:
                    os.write(w, json.dumps([os.getpid(), sleeper()]).encode() + b"\n")
                    while True:
                        time.sleep(1)
                finally:
                    os._exit(0)
            return json.loads(os.read(r, 1024))

        orphans = in_fork(candidate)
        me = os.getpid()
        adopted = confine._stat(orphans[0])[0] == me
        killed = kill_descendants()
        gone = [dead(pid, timeout=0.5) for pid in orphans]
        for pid in orphans:
            if not dead(pid, timeout=0):
                os.kill(pid, signal.SIGKILL)
        reaped = reap_zombies()
        left = [pid for pid in orphans if confine._stat(pid) is not None and confine._stat(pid)[0] == me]
        return {"adopted": adopted, "killed": killed, "gone": gone, "reaped": reaped, "left": left}

    assert in_fork(lambda: judge(True)) == {"adopted": True, "killed": 2, "gone": [True, True], "reaped": 2,
                                            "left": []}
    # The control: without a subreaper the orphans went to init, out of the judge's reach.
    out = in_fork(lambda: judge(False))
    assert (out["adopted"], out["killed"], out["gone"]) == (False, 0, [False, False])


def test_kill_descendants_of_another_root_and_a_fork_storm() -> None:
    def judge() -> dict[str, Any]:
        make_subreaper()
        r, w = os.pipe()
        root = os.fork()
        if root == 0:  # a process whose children keep forking
            try:
                for _ in range(4):
                    if os.fork() == 0:
                        while True:
                            if os.fork() == 0:
                                time.sleep(0.05)
                                os._exit(0)
                            time.sleep(0.01)
                os.write(w, b"up\n")
                while True:
                    time.sleep(1)
            finally:
                os._exit(0)
        os.read(r, 3)
        time.sleep(0.1)
        killed = kill_descendants(root)
        left = confine._live_descendants(root)
        root_alive = not dead(root, timeout=0)
        os.kill(root, signal.SIGKILL)
        os.waitpid(root, 0)
        kill_descendants()
        reap_zombies()
        return {"killed": killed, "left": len(left), "root alive": root_alive}

    out = in_fork(judge)
    assert out["killed"] >= 4 and out["left"] == 0 and out["root alive"], out


def test_set_affinity_reaches_every_thread_of_the_candidate() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    target = [cpus[-1]]
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            confine_me()
            seen: dict[str, list[int]] = {}
            go = threading.Event()

            def worker() -> None:
                go.wait()
                seen["thread"] = sorted(os.sched_getaffinity(0))

            thread = threading.Thread(target=worker)
            thread.start()
            os.write(ready_w, b"r")
            os.read(go_r, 1)
            go.set()
            thread.join()
            seen["main"] = sorted(os.sched_getaffinity(0))
            os.write(ready_w, json.dumps(seen).encode() + b"\n")
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"r"
        set_affinity(pid, target)
        os.write(go_w, b"g")
        seen = json.loads(os.read(ready_r, 4096))
    finally:
        os.waitpid(pid, 0)
    assert seen == {"thread": target, "main": target}


def test_cpus_for_slot() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    n = len(cpus)
    for threads in range(1, n + 2):
        slots = [cpus_for_slot(slot, threads) for slot in range(2 * n + 1)]
        assert all(len(s) == min(threads, n) and set(s) <= set(cpus) for s in slots)
        fitting = n // threads
        if fitting >= 2:  # the slots that fit side by side are disjoint
            assert len({c for s in slots[:fitting] for c in s}) == fitting * threads
        assert slots[0] == cpus[:min(threads, n)]
    assert cpus_for_slot(n, 1) == cpus_for_slot(0, 1)  # wraps
    with pytest.raises(ValueError):
        cpus_for_slot(0, 0)


def test_threads_and_torch_work_under_the_filter() -> None:
    """Like a supervisor: torch imported in the parent, the forked child filters itself and computes."""
    script = textwrap.dedent("""
        import json, os, threading
        import torch
        from kernelrl.evaluate.confine import install_seccomp
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            out = {"reason": install_seccomp()}
            box = []
            t = threading.Thread(target=lambda: box.append(sum(range(1000))))
            t.start(); t.join()
            torch.set_num_threads(2)
            x = torch.randn(512, 512, dtype=torch.float64)
            y = x @ x
            expected = (x[:8].unsqueeze(2) * x.unsqueeze(0)).sum(1)
            out.update(thread=box, threads=torch.get_num_threads(), close=bool((y[:8] - expected).abs().max() < 1e-9),
                       tasks=len(os.listdir("/proc/self/task")))
            os.write(w, json.dumps(out).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(os.read(r, 4096).decode())
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["reason"] is None and out["thread"] == [499500] and out["threads"] == 2 and out["close"], out
    assert out["tasks"] >= 2, out  # torch's second compute thread was created under the filter


@needs_root
def test_make_undumpable_hides_memory_from_same_uid() -> None:
    def judge() -> dict[str, dict[str, int]]:
        os.setgroups([])
        os.setresgid(UNPRIVILEGED, UNPRIVILEGED, UNPRIVILEGED)
        os.setresuid(UNPRIVILEGED, UNPRIVILEGED, UNPRIVILEGED)
        confine._prctl(confine.PR_SET_DUMPABLE, 1)  # setuid made it undumpable; start from dumpable
        parent = os.getpid()

        def reader() -> dict[str, int]:
            def read_mem() -> None:
                with open(f"/proc/{parent}/mem", "rb"):
                    pass

            return {"mem": err(read_mem), "fd": err(lambda: os.listdir(f"/proc/{parent}/fd"))}

        before = in_fork(reader)
        make_undumpable()
        return {"before": before, "after": in_fork(reader)}

    out = in_fork(judge)
    assert out["before"] == {"mem": 0, "fd": 0}
    assert out["after"] == {"mem": errno.EACCES, "fd": errno.EACCES}


@needs_root
def test_kill_uid_kills_that_uid_only() -> None:
    def spawn_as(uid: int) -> list[int]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.write(w, json.dumps([os.getpid(), sleeper()]).encode() + b"\n")
                while True:
                    time.sleep(1)
            finally:
                os._exit(0)
        os.close(w)
        return json.loads(os.read(r, 1024))

    def judge() -> dict[str, Any]:
        make_subreaper()
        victims, bystanders = spawn_as(UNPRIVILEGED + 1), spawn_as(UNPRIVILEGED + 2)
        kill_uid(UNPRIVILEGED + 1)
        out = {"victims dead": [dead(p) for p in victims], "bystanders alive": [not dead(p, 0.2) for p in bystanders]}
        for pid in bystanders:
            os.kill(pid, signal.SIGKILL)
        kill_descendants()
        reap_zombies()
        return out

    assert in_fork(judge) == {"victims dead": [True, True], "bystanders alive": [True, True]}
    with pytest.raises(ValueError):
        kill_uid(0)


def test_both_syscall_tables_assemble() -> None:
    programs = {name: confine.filter_program(arch, 4242) for name, arch in confine.ARCHES.items()}
    assert all(len(p) % 8 == 0 and len(p) // 8 < 4096 for p in programs.values())
    assert programs["x86_64"] != programs["aarch64"]
    assert set(confine.DENIED) - set(confine.AARCH64) == {"iopl", "ioperm"}
    assert set(confine.DENIED) <= set(confine.X86_64)
    with pytest.raises(ValueError):
        confine.filter_program(confine.ARCHES["x86_64"], 0)


def test_install_cost_is_small() -> None:
    def candidate() -> float:
        start = time.perf_counter()
        assert install_seccomp() is None
        return time.perf_counter() - start

    costs = sorted(in_fork(candidate) for _ in range(5))
    assert costs[2] < 0.05, costs

