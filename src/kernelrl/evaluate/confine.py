"""OS-level confinement of a candidate process: a seccomp filter, CPU placement and process hygiene.

The judge (trusted: it owns inputs, reference outputs, the clock and the verdict) forks the candidate,
which installs `install_seccomp` on itself before running untrusted code. The filter keeps the candidate
(and everything it forks, which inherits the filter) from reaching other processes: no tracing or
reading another process's memory, no signals except to itself or its own process group, no leaving
its process group or session (so the judge's `killpg` reaches every descendant), no changing another
process's scheduling, priority or limits, no CPU placement of its own (the judge's `set_affinity`),
no namespaces, no sockets except AF_UNIX, and none of the kernel-administration calls (modules,
mounts, keys, BPF, perf, io_uring, which would bypass the filter). A denied call fails with EPERM
instead of killing the process, so honest code gets an error it can report. Two calls are answered
differently: `clone3` fails with ENOSYS (its flags live in memory the filter cannot read, and glibc
falls back to `clone`, whose flags it can), and `setpgid` reports success without doing anything
(ninja, which torch's `load_inline` runs, puts every compiler in a group of its own through
`posix_spawn` and fails outright on an error; its compilers simply stay in the candidate's group).

The filter names the pid it may signal (`own_pid`, by default the installing process); a process the
candidate forks inherits that filter unchanged, so it may signal the candidate (and its own group
with pid 0) but neither itself by pid nor its own children: `os.kill(os.getpid(), sig)` and `raise()`
fail there with EPERM, `os.kill(0, sig)` works, and `abort()` ends it with SIGSEGV instead of SIGABRT
(glibc's fallback when raising SIGABRT fails).

The helpers are for the judge: `cpus_for_slot` and `set_affinity` place a candidate's threads,
`make_subreaper` keeps orphaned descendants under the judge, `kill_descendants` kills them (also
those that escaped the process group), `reap_zombies` collects what is left, `kill_uid` kills every
process of a slot's uid, and `make_undumpable` keeps same-uid processes out of the judge's memory.
Linux only.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import platform
import signal
import struct
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian halves).
_NR = 0
_ARCH = 4


def _arg(index: int, high: bool = False) -> int:
    return 16 + 8 * index + (4 if high else 0)


AF_UNIX = 1
PR_TASK_PERF_EVENTS_DISABLE, PR_TASK_PERF_EVENTS_ENABLE = 31, 32
PRIO_PROCESS = 0
IOPRIO_WHO_PROCESS = 1
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (CLONE_NEWTIME, 0x80, is in
# clone's exit-signal byte and only reachable through clone3 or unshare, both denied).
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# Always denied (EPERM). Names absent from an architecture's table (iopl, ioperm on aarch64) are skipped.
DENIED = (
    # other processes' memory and state
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
    # kernel facilities that read other processes or bypass seccomp
    "perf_event_open", "bpf", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key",
    # namespaces and mounts (the new mount API too)
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # administration
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "iopl", "ioperm",
    "personality", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "fanotify_init",
    # the clocks the judge measures with (reachable only by a candidate that kept root)
    "settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
    # leaving the judge's process group and CPU placement
    "setsid", "sched_setaffinity",
    # its target is a pidfd, which may name any process (pidfd_open is not restricted)
    "pidfd_send_signal",
)
# Allowed only when the pid in argument 0 is 0 (the caller) or own_pid.
PID_ARG0 = (
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "sched_setscheduler", "sched_setparam", "sched_setattr", "migrate_pages", "move_pages",
)

X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438, "kcmp": 312,
    "process_madvise": 440, "perf_event_open": 298, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248, "request_key": 249,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "iopl": 172, "ioperm": 173, "personality": 135, "reboot": 169, "swapon": 167,
    "swapoff": 168, "acct": 163, "quotactl": 179, "quotactl_fd": 443, "syslog": 103, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "lookup_dcookie": 212, "fanotify_init": 300, "settimeofday": 164,
    "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305, "setsid": 112, "sched_setaffinity": 203,
    "pidfd_send_signal": 424, "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
    "rt_tgsigqueueinfo": 297, "sched_setscheduler": 144, "sched_setparam": 142, "sched_setattr": 314,
    "migrate_pages": 256, "move_pages": 279, "setpgid": 109, "setpriority": 141, "ioprio_set": 251,
    "prlimit64": 302, "socket": 41, "clone": 56, "clone3": 435, "seccomp": 317, "prctl": 157,
}
AARCH64 = {  # the generic table (asm-generic/unistd.h)
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438, "kcmp": 272,
    "process_madvise": 440, "perf_event_open": 241, "bpf": 280, "userfaultfd": 282, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219, "add_key": 217, "request_key": 218,
    "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
    "delete_module": 106, "personality": 92, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
    "quotactl": 60, "quotactl_fd": 443, "syslog": 116, "open_by_handle_at": 265, "name_to_handle_at": 264,
    "lookup_dcookie": 18, "fanotify_init": 262, "settimeofday": 170, "clock_settime": 112, "adjtimex": 171,
    "clock_adjtime": 266, "setsid": 157, "sched_setaffinity": 122, "pidfd_send_signal": 424, "kill": 129,
    "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "sched_setscheduler": 119,
    "sched_setparam": 118, "sched_setattr": 274, "migrate_pages": 238, "move_pages": 239, "setpgid": 154,
    "setpriority": 140, "ioprio_set": 30, "prlimit64": 261, "socket": 198, "clone": 220, "clone3": 435,
    "seccomp": 277, "prctl": 167,
}


@dataclass(frozen=True)
class Arch:
    """One architecture's audit value and syscall numbers; `x32_bit` marks a second ABI to refuse."""

    name: str
    audit: int
    numbers: dict[str, int]
    x32_bit: int | None = None


ARCHES = {
    "x86_64": Arch("x86_64", 0xC000003E, X86_64, x32_bit=0x40000000),
    "aarch64": Arch("aarch64", 0xC00000B7, AARCH64),
}


def native_arch() -> Arch | str:
    """This process's syscall table, or why there is none."""
    machine = platform.machine()
    if sys.platform != "linux":
        return f"seccomp needs Linux, not {sys.platform}"
    if machine not in ARCHES:
        return f"no seccomp syscall table for {machine!r} (have {', '.join(ARCHES)})"
    if struct.calcsize("P") != 8 or sys.byteorder != "little":
        return f"a 64-bit little-endian process is needed for the {machine} table"
    return ARCHES[machine]


class _Asm:
    """Classic BPF with forward jumps to labels (a jump's target must be 0..255 instructions ahead)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | None, str | None, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, None, None, offset))

    def jump(self, op: int, k: int, true: str | None = None, false: str | None = None) -> None:
        """Compare the accumulator with `k`; None falls through to the next instruction."""
        self.code.append((op, true, false, k))

    def ret(self, value: int) -> None:
        self.code.append((_RET, None, None, value))

    def assemble(self) -> bytes:
        out = []
        for i, (op, true, false, k) in enumerate(self.code):
            offsets = []
            for target in (true, false):
                delta = 0 if target is None else self.labels[target] - i - 1
                if not 0 <= delta <= 255:
                    raise ValueError(f"BPF jump from {i} to {target!r} out of range ({delta})")
                offsets.append(delta)
            out.append(struct.pack("=HBBI", op, offsets[0], offsets[1], k))
        return b"".join(out)


def filter_program(arch: Arch, own_pid: int, deny_errno: int = errno.EPERM) -> bytes:
    """The candidate filter as `struct sock_filter` bytes (8 per instruction)."""
    if not 0 < own_pid < 2**32:
        raise ValueError(f"own_pid must be a positive pid, not {own_pid}")
    nr = arch.numbers
    a = _Asm()
    a.load(_ARCH)
    a.jump(_JEQ, arch.audit, None, "deny")  # another ABI (i386 through int 0x80, arm32): nothing allowed
    a.load(_NR)
    if arch.x32_bit is not None:
        a.jump(_JGE, arch.x32_bit, "deny")
    # Calls whose verdict depends on their arguments come first: they run this program every time, while
    # the kernel (5.11+) caches the verdict of every call that is allowed whatever its arguments.
    a.jump(_JEQ, nr["clone"], "clone")
    for name in PID_ARG0:
        a.jump(_JEQ, nr[name], "pid_arg0")
    a.jump(_JEQ, nr["socket"], "socket")
    a.jump(_JEQ, nr["prlimit64"], "prlimit64")
    a.jump(_JEQ, nr["setpriority"], "setpriority")
    a.jump(_JEQ, nr["ioprio_set"], "ioprio_set")
    a.jump(_JEQ, nr["prctl"], "prctl")
    a.jump(_JEQ, nr["clone3"], "enosys")
    a.jump(_JEQ, nr["setpgid"], "pretend")
    for name in DENIED:
        if name in nr:
            a.jump(_JEQ, nr[name], "deny")
    a.ret(RET_ALLOW)

    def arg_is(index: int, value: int) -> None:  # falls through if equal, else denies
        a.load(_arg(index, high=True))
        a.jump(_JEQ, 0, None, "deny")
        a.load(_arg(index))
        a.jump(_JEQ, value, None, "deny")

    def pid_arg(index: int) -> None:  # allows 0 (the caller) and own_pid, denies anything else
        a.load(_arg(index, high=True))
        a.jump(_JEQ, 0, None, "deny")
        a.load(_arg(index))
        a.jump(_JEQ, 0, "allow")
        a.jump(_JEQ, own_pid, "allow", "deny")

    a.label("setpriority")  # (which, who, prio): one process only, never a group or a user
    arg_is(0, PRIO_PROCESS)
    pid_arg(1)
    a.label("ioprio_set")  # (which, who, ioprio)
    arg_is(0, IOPRIO_WHO_PROCESS)
    pid_arg(1)
    a.label("prlimit64")  # (pid, resource, new_limit, old_limit): reading anyone's limits is fine
    a.load(_arg(2, high=True))
    a.jump(_JEQ, 0, None, "pid_arg0")
    a.load(_arg(2))
    a.jump(_JEQ, 0, "allow", "pid_arg0")
    a.label("prctl")  # (option, ...): no perf-event switches (they act on the caller's own events; defence in depth)
    a.load(_arg(0))
    a.jump(_JEQ, PR_TASK_PERF_EVENTS_DISABLE, "deny")
    a.jump(_JEQ, PR_TASK_PERF_EVENTS_ENABLE, "deny", "allow")
    a.label("socket")  # (domain, type, protocol)
    arg_is(0, AF_UNIX)
    a.ret(RET_ALLOW)
    a.label("clone")  # flags are argument 0 on x86_64 and aarch64; the kernel reads their low half only
    a.load(_arg(0))
    a.jump(_JSET, CLONE_NEW_MASK, "deny", "allow")
    a.label("pid_arg0")
    pid_arg(0)
    a.label("allow")
    a.ret(RET_ALLOW)
    a.label("deny")
    a.ret(RET_ERRNO | (deny_errno & 0xFFFF))
    a.label("enosys")
    a.ret(RET_ERRNO | errno.ENOSYS)
    a.label("pretend")
    a.ret(RET_ERRNO | 0)  # errno 0: the call is skipped and returns 0
    return a.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _prctl(option: int, value: int) -> None:
    if _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                     ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {value}): {os.strerror(err)}")


def install_filter(program: bytes, arch: Arch) -> str | None:
    """Install a BPF program on every thread of the calling process; None, or why it failed."""
    try:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
    except OSError as exc:
        return f"could not set no_new_privs: {exc.strerror}"
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    rc = _libc().syscall(ctypes.c_long(arch.numbers["seccomp"]), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                         ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if rc < 0:
        err = ctypes.get_errno()
        return f"the kernel refused the seccomp filter: {errno.errorcode.get(err, err)} ({os.strerror(err)})"
    if rc > 0:
        return f"thread {rc} could not take the seccomp filter (TSYNC)"
    return None


def install_seccomp(own_pid: int | None = None) -> str | None:
    """Install the candidate filter on the calling process (all its threads: SECCOMP_FILTER_FLAG_TSYNC);
    inherited by children. `own_pid` (default: this process) is the one pid signals may name besides 0.
    Returns None on success, else a one-line reason it could not be installed (unsupported arch, kernel
    refused). Also sets no_new_privs, so set-uid programs no longer gain privileges.

    Call it after `os.setpgid(0, 0)` and after dropping privileges: under the filter setpgid does nothing,
    and a candidate that keeps root can still open the judge's /proc/PID/mem (CAP_SYS_PTRACE beats
    `make_undumpable`) or raise its own hard rlimits."""
    arch = native_arch()
    if isinstance(arch, str):
        return arch
    return install_filter(filter_program(arch, os.getpid() if own_pid is None else own_pid), arch)


def set_affinity(pid: int, cpus: list[int]) -> None:
    """Pin every thread of process `pid` to `cpus`, from outside (the filtered candidate cannot).

    sched_setaffinity moves one thread, so each thread in /proc/PID/task is set, repeating until a pass
    finds no new thread (threads created later inherit the mask from an already pinned creator).
    Raises ProcessLookupError if the process is gone.
    """
    mask = set(cpus)
    os.sched_setaffinity(pid, mask)
    done = {pid}
    for _ in range(1000):
        try:
            threads = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
        except FileNotFoundError:
            raise ProcessLookupError(errno.ESRCH, f"process {pid} is gone") from None
        new = threads - done
        if not new:
            return
        for tid in new:
            try:
                os.sched_setaffinity(tid, mask)
            except ProcessLookupError:
                pass  # that thread has exited
        done |= new


def cpus_for_slot(slot: int, threads: int) -> list[int]:
    """The CPUs for worker slot `slot` running `threads` threads, from this process's allowed CPUs.

    Consecutive slots get consecutive, disjoint blocks while slots * threads fit; beyond that the
    blocks wrap around (and overlap). More threads than CPUs get every CPU.
    """
    if slot < 0 or threads < 1:
        raise ValueError(f"need slot >= 0 and threads >= 1, got {slot}, {threads}")
    cpus = sorted(os.sched_getaffinity(0))
    if threads >= len(cpus):
        return cpus
    start = slot * threads % len(cpus)
    return sorted(cpus[(start + i) % len(cpus)] for i in range(threads))


def make_subreaper() -> None:
    """Orphaned descendants of the caller become its children (not init's): kill_descendants finds them."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def make_undumpable() -> None:
    """Same-uid processes can no longer ptrace the caller or open its /proc/PID/mem, fd, environ, ...

    Processes with CAP_SYS_PTRACE (root) still can. An execve resets the flag to dumpable, a change of
    uid or gid to /proc/sys/fs/suid_dumpable (see PR_SET_DUMPABLE in prctl(2))."""
    _prctl(PR_SET_DUMPABLE, 0)


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a process from /proc/PID/stat, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), fields[0].decode(), int(fields[19])


def _processes() -> dict[int, tuple[int, str, int]]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                table[int(name)] = stat
    return table


def _children(pid: int) -> list[int] | None:
    """Direct children of `pid` from /proc/PID/task/*/children (None where the kernel lacks that file)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(c) for c in f.read().split())
        except FileNotFoundError:
            if tid == tasks[0] and not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread is gone
            return None
        except OSError:
            continue
    return found


def _live_descendants(root: int) -> dict[int, int]:
    """pid -> start time of every descendant of `root` that is not yet a zombie: a walk down the children
    lists (a few reads), or a scan of every process where the kernel has no children lists."""
    found: dict[int, int] = {}
    stack = _children(root)
    if stack is None:
        return _live_descendants_by_scan(root)
    while stack:
        pid = stack.pop()
        stat = _stat(pid)
        if stat is None:
            continue
        if stat[1] not in ("Z", "X"):
            found[pid] = stat[2]
        grandchildren = _children(pid)
        if grandchildren is None:
            return _live_descendants_by_scan(root)
        stack.extend(grandchildren)
    return found


def _live_descendants_by_scan(root: int) -> dict[int, int]:
    children: dict[int, list[int]] = {}
    table = _processes()
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, int] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        _, state, start = table[pid]
        if state not in ("Z", "X"):
            found[pid] = start
        stack.extend(children.get(pid, ()))
    return found


def _kill_exact(pid: int, start: int) -> bool:
    """SIGKILL the process `pid` only if it is still the one that started at `start` (no pid reuse)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfds (old kernel): a plain kill after the check
        stat = _stat(pid)
        if stat is None or stat[2] != start:
            return False
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True
    try:
        stat = _stat(pid)  # read while the pidfd pins the process: if it still matches, it is ours
        if stat is None or stat[2] != start:
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def kill_descendants(root_pid: int | None = None, *, timeout: float = 5.0, wait: bool = True,
                     spare: int | None = None) -> int:
    """SIGKILL every process whose parent chain leads to the caller (or `root_pid`), repeating until none
    is alive (processes re-parent as their parents die, to the caller if it is a subreaper, so call
    `make_subreaper` first or orphans escape to init). Returns how many processes were killed; gives up
    after `timeout` seconds (a process stuck in the kernel). Zombies are left to `reap_zombies`.

    `wait=False`: stop once a pass finds no descendant that was not killed already, without waiting for
    the killed ones to finish exiting. A process with SIGKILL pending runs no more user code and its forks
    fail, so a child created by a fork that was already under way shows up in the next pass, and a pass
    that finds nothing new leaves nothing that can act. `spare`: a child (a judge forked ahead of its job,
    and the candidate process it forked, which waits for the job too) left alone with its descendants."""
    root = os.getpid() if root_pid is None else root_pid
    killed: set[tuple[int, int]] = set()
    deadline = time.monotonic() + timeout
    while True:
        live = _live_descendants(root)
        if spare is not None and spare in live:
            for pid in (spare, *_live_descendants(spare)):
                live.pop(pid, None)
        new = {pid: start for pid, start in live.items() if (pid, start) not in killed}
        if not live or (not wait and not new):
            break
        for pid, start in new.items():
            if _kill_exact(pid, start):
                killed.add((pid, start))
        if time.monotonic() > deadline:
            break
        time.sleep(0.001)  # killed processes take a moment to exit; an in-flight fork to finish
    return len(killed)


def reap_zombies(exclude: Iterable[int] = ()) -> int:
    """Collect the caller's exited children (orphans that a subreaper inherited), except `exclude` (the
    children whose exit status the caller still wants). Returns how many were reaped."""
    me, skip, reaped = os.getpid(), set(exclude), 0
    for pid, (ppid, state, _) in _processes().items():
        if ppid == me and state in ("Z", "X") and pid not in skip:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
            except ChildProcessError:
                pass
    return reaped


def _live_of_uid(uid: int, exclude: int) -> bool:
    for pid in _processes().keys() - {exclude}:
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        real, _, saved, _ = (int(x) for x in fields["Uid"].split())
        if uid in (real, saved) and fields["State"].split()[0] not in ("Z", "X"):
            return True
    return False


def kill_uid(uid: int, *, timeout: float = 5.0) -> None:
    """Kill every process of `uid` (real or saved uid): a forked helper becomes `uid` and repeats
    kill(-1, SIGKILL) until none is left or `timeout` passes. A no-op unless the caller is root."""
    if os.geteuid() != 0:
        return
    if uid == 0:
        raise ValueError("kill_uid(0) would kill every root process")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    os.kill(-1, signal.SIGKILL)  # every process this uid may signal, except this one
                except ProcessLookupError:
                    code = 0
                    break
                if not _live_of_uid(uid, os.getpid()):
                    code = 0
                    break
                time.sleep(0.001)
        finally:
            os._exit(code)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        log.warning("processes of uid %d may have survived kill_uid", uid)
