"""Out-of-process instruction-pointer sampling of a candidate process (ptrace), and time-based coverage.

The judge proves from outside the candidate's address space which native code did the work: a
`PcSampler` thread seizes every thread of the candidate (`PTRACE_SEIZE`, following clones, forks and
execs), and at each tick interrupts them, reads each thread's program counter and lets it run on.
PCs are mapped to the file mapped there (`/proc/PID/maps`), and `classify` files those objects as the
candidate's own code, fallback compute (torch, BLAS, numpy, ...) or overhead (interpreter, libc).

Sampling is per thread and in wall-clock time: a runnable thread that is not on a CPU is sampled
where it stands, a blocked thread is sampled inside libc (overhead). Signals keep working (each
signal stop is re-delivered, group stops are left stopped with `PTRACE_LISTEN`), and the process is
never killed: if the sampler thread dies, the kernel detaches and resumes every tracee.

Contract for the caller: while a sampler runs, no other thread of this process may wait for the
sampled process (`Popen.wait`/`poll`/`communicate`, `os.waitpid(-1)`, asyncio child watchers): the
kernel reports the ptrace stops of a tracer's own children to any waiter of its thread group. Use
`PcSampler.wait` (sampling ends when the process exits; its exit status is left for the caller), or
`stop()` before waiting.

Holding (`hold`, `wait_quiet`, `release`): the judge stops the candidate after each reply and reads its
outputs while it is stopped; a tracer may resume a thread from its own stops, so while held the sampler
sends no interrupts and keeps every ptrace stop it takes (letting only stop signals through, into the
group stop), and `wait_quiet` returns once every tracee is group-stopped or kept: no thread can run user
code until `release`. Each sampled object keeps the identity (st_dev, st_ino) /proc/PID/maps shows
for its file; `classify` counts an object as the candidate's own only by that identity (the libraries
the build broker built, `evaluate.build_identity`), never by its path.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import os
import platform
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any

from kernelrl.evaluate.build_identity import NO_FILE, Identity, mapped_identity, maps_identity_of_device

_PTRACE_CONT, _PTRACE_DETACH = 7, 17
_PTRACE_GETEVENTMSG, _PTRACE_GETSIGINFO, _PTRACE_GETREGSET = 0x4201, 0x4202, 0x4204
_PTRACE_SEIZE, _PTRACE_INTERRUPT, _PTRACE_LISTEN = 0x4206, 0x4207, 0x4208
_OPTIONS = 0x02 | 0x04 | 0x08 | 0x10  # TRACEFORK | TRACEVFORK | TRACECLONE | TRACEEXEC
_EV_FORK, _EV_VFORK, _EV_CLONE, _EV_EXEC, _EV_STOP = 1, 2, 3, 4, 128
_WALL = 0x40000000
_NT_PRSTATUS = 1
_STOP_SIGNALS = frozenset({signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU})
# NT_PRSTATUS register set per architecture: (size in u64 words, index of the program counter).
_REGS = {"x86_64": (27, 16), "aarch64": (34, 32)}
_MAPS_MAX_AGE_S = 0.1  # code can be unmapped and replaced; re-read the maps at least this often
_STUCK_S = 0.02  # a thread interrupted this long without news is checked in /proc


@dataclass
class PcSamples:
    """Thread time per mapped object ("[anon]", "[vdso]", "[unknown]" for code no file backs).

    Time is counted in sampling periods (1/hz): the number of samples, had every tick been on time.
    """

    by_object: dict[str, int]
    total: int
    threads_seen: int  # threads that were sampled
    error: str | None = None  # why sampling failed or was unavailable
    ticks: int = 0  # sampling rounds
    cpu_s: float = 0.0  # CPU time of the sampler thread
    hits: dict[str, int] = field(default_factory=dict)  # raw samples per object, unweighted (for statistics)
    lost: int = 0  # samples the kernel could not write (perf sampling with a full ring buffer)
    method: str = "ptrace"  # "ptrace" (this module) or "perf" (`evaluate.perf_sampler`)
    identities: dict[str, Identity] = field(default_factory=dict)  # object -> its file's (st_dev, st_ino)


@dataclass
class Coverage:
    """Samples split into the candidate's own code, fallback compute and overhead."""

    own: int
    fallback: int
    overhead: int
    total: int
    own_hits: int = 0  # raw samples (a late sample of a thread that waited for a CPU weighs more in `own`)
    fallback_hits: int = 0

    @property
    def fraction(self) -> float | None:
        """Own time over compute time (own + fallback); None without compute samples."""
        compute = self.own + self.fallback
        return self.own / compute if compute else None


#: How `classify` files a sampled object that is not the candidate's own (a library the build broker
#: built, told by identity): the first rule whose regex matches the object's path wins. Objects no rule
#: matches are DEFAULT_CLASS.
#: - overhead: the interpreter, C/C++ runtimes and loaders, CPython's stdlib extension modules, and
#:   the OpenMP runtimes. libgomp/libiomp run no arithmetic of their own: a parallel region's body runs
#:   in the library that owns the loop (the candidate's or torch's), so the runtime's spin-waits and
#:   barriers are neither party's compute. libm is overhead too (called by own and fallback code alike).
#: - overhead too: torch's Python bindings (libtorch_python), its core (libc10: tensor bookkeeping, the
#:   allocator) and libshm, where calling into a kernel through torch spends time but no operator computes.
#: - fallback: torch's operators (any other libtorch*, and torch.compile's generated libraries under
#:   torchinductor_*), BLAS/LAPACK (OpenBLAS, MKL, reference BLAS), sleef, oneDNN, numpy's compute
#:   modules, and anonymous executable memory: JIT code (oneDNN's kernels, ...) is not attributable to
#:   the candidate, so it counts against it.
#: - DEFAULT_CLASS ("fallback"): any other file-backed code, wherever it lies (the candidate's work
#:   directory included). Fail closed: compute hidden in a library nobody listed (scipy.ndimage, numba, a
#:   copy of a BLAS library, code the candidate process compiled itself) must not look like overhead.
#: The rules match paths, so the judge also requires an overhead file to be one it has mapped itself (the
#: same identity: the interpreter, libc, torch's core and runtimes); a look-alike name is fallback.
OBJECT_CLASSES: tuple[tuple[str, str], ...] = (
    (r"^\[(vdso|vsyscall|vvar|uprobes|unknown)\]$", "overhead"),
    (r"/python[\d.]*$|/libpython[\d.]*\.so|/lib-dynload/", "overhead"),
    (r"/(ld-linux[^/]*|ld64[^/]*|libc|libm|libmvec|libdl|libpthread|librt|libutil|libresolv)[.-][^/]*$", "overhead"),
    (r"/lib(stdc\+\+|gcc_s|atomic|ffi|quadmath|gfortran|z|zstd|lzma|bz2|crypto|ssl|uuid|expat)[.-][^/]*$",
     "overhead"),
    (r"/lib(g|i)omp[^/]*$", "overhead"),
    # torch's Python bindings and core (argument checks, tensor bookkeeping, the allocator): calling into a
    # kernel through torch costs time there, but no operator computes there.
    (r"/libtorch_python[^/]*$|/libc10[^/]*$|/libshm[^/]*$", "overhead"),
    (r"/libtorch[^/]*$|/torchinductor_", "fallback"),
    (r"/lib(scipy_)?openblas[^/]*$|/libmkl[^/]*$|/lib(c)?blas[.-][^/]*$|/liblapack[^/]*$", "fallback"),
    (r"/libsleef[^/]*$|/lib(dnnl|mkldnn)[^/]*$", "fallback"),
    (r"/(_multiarray_umath|_umath_linalg|_pocketfft[^/.]*)\.[^/]*$", "fallback"),
    (r"^\[anon\]$", "fallback"),
)
DEFAULT_CLASS = "fallback"
_RULES = tuple((re.compile(pattern), cls) for pattern, cls in OBJECT_CLASSES)


def object_class(path: str) -> str:
    """"fallback" or "overhead" for one sampled object that is not the candidate's own (see OBJECT_CLASSES)."""
    return next((cls for rule, cls in _RULES if rule.search(path)), DEFAULT_CLASS)


def classify(samples: PcSamples, own: Container[Identity], runtime: Container[Identity] | None = None) -> Coverage:
    """Split `samples` into own (objects whose identity is in `own`: the broker's builds), fallback and
    overhead (`object_class`). With `runtime` (the identities of the files mapped in the judge itself), a
    file is overhead only if it is one of them: a library named like libc or libgomp that the candidate
    brought is fallback, wherever it lies."""
    counts = {"own": 0, "fallback": 0, "overhead": 0}
    hits = dict(counts)

    def cls(name: str) -> str:
        identity = samples.identities.get(name, NO_FILE)
        if identity != NO_FILE and identity in own:
            return "own"
        kind = object_class(name)
        if kind == "overhead" and runtime is not None and name.startswith("/") and identity not in runtime \
                and not _system_file(name, identity):
            return "fallback"
        return kind

    for name, n in samples.by_object.items():
        counts[cls(name)] += n
    for name, n in samples.hits.items():
        hits[cls(name)] += n
    return Coverage(counts["own"], counts["fallback"], counts["overhead"], samples.total, hits["own"], hits["fallback"])


@functools.lru_cache(maxsize=256)
def _system_file(path: str, identity: Identity) -> bool:
    """A root-owned file, writable by no one else, in a root-owned system library directory, whose mapping
    has the sampled identity: the OS's own runtime (libm, libc, libgomp), which no candidate can have placed."""
    if not path.startswith(("/usr/lib", "/lib")):
        return False
    try:
        parent = os.stat(os.path.dirname(path))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        unsafe = stat.S_IWGRP | stat.S_IWOTH
        if st.st_uid != 0 or parent.st_uid != 0 or st.st_mode & unsafe or parent.st_mode & unsafe:
            return False
        return mapped_identity(fd) == identity
    except OSError:
        return False
    finally:
        os.close(fd)


def object_key(name: str, identity: Identity, identities: dict[str, Identity]) -> str:
    """The key a sample of `name` with `identity` is counted under: the path, or, when another file was
    seen under that path before (replaced meanwhile), the path with the identity, so that no two files
    share a key (and a suffixed key matches no runtime's rule)."""
    known = identities.setdefault(name, identity)
    if known == identity:
        return name
    key = f"{name} [{identity[0]}:{identity[1]}]"
    identities.setdefault(key, identity)
    return key


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _libc_ptrace() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).ptrace
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return fn


_ptrace_fn = _libc_ptrace() if sys.platform == "linux" else None


def _ptrace(request: int, tid: int, addr: int | None = None, data: int | None = None) -> int:
    """ptrace(2); returns 0 or -errno."""
    if _ptrace_fn is None:
        return -1
    result = _ptrace_fn(request, tid, addr, data)
    return -ctypes.get_errno() if result == -1 else 0


def _parse_maps(text: str) -> tuple[list[int], list[int], list[str], list[Identity]]:
    """Executable mappings in a /proc/PID/maps text, sorted: (starts, ends, names, file identities)."""
    starts, ends, names, identities = [], [], [], []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 2 or "x" not in parts[1]:
            continue
        path = parts[5] if len(parts) > 5 else ""
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        identity = maps_identity_of_device(parts[3], parts[4]) if len(parts) > 4 else NO_FILE
        if not path or path in ("[heap]", "[stack]") or path.startswith(("[anon", "[stack")):
            path = "[anon]"
        if not path.startswith("/"):
            identity = NO_FILE
        lo, hi = parts[0].split("-")
        starts.append(int(lo, 16))
        ends.append(int(hi, 16))
        names.append(path)
        identities.append(identity)
    return starts, ends, names, identities


def mapped_object(starts: list[int], ends: list[int], names: list[str], identities: list[Identity],
                  address: int) -> tuple[str, Identity] | None:
    """The name and file identity of the mapping (from `_parse_maps`) that holds `address`, or None."""
    i = bisect.bisect_right(starts, address) - 1
    return (names[i], identities[i]) if i >= 0 and address < ends[i] else None


def _proc_state(tgid: int, tid: int) -> str:
    """One-letter /proc state of thread `tid` ("" when it is gone)."""
    try:
        with open(f"/proc/{tgid}/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@dataclass
class _Tracee:
    tgid: int
    state: str = "run"  # "run"; "new": its first stop is due; "stop": group-stopped, listening; "held": kept stopped
    armed: bool = False  # interrupted, its stop not yet collected
    since: float = 0.0  # when it was interrupted (or created)
    last: float = 0.0  # the time up to which its samples account for it
    held_in: int = 0  # the hold it is kept stopped for
    held_signal: int = 0  # the signal to deliver when it is let go


class PcSampler:
    """Samples the PC of every thread of process `pid` (a child of the caller) at ~`hz` until stop().

    Runs its own thread: ptrace binds tracees to the tracer thread, so attach, sampling and detach
    all happen there. Threads, forked children and exec'd images of the process are followed.
    Each sample of a thread stands for the time since its previous sample, so late ticks (a busy
    machine) do not bias the result. A thread that cannot stop at once (waiting for a CPU, inside a
    syscall) runs no user code until it does: its PC when it stops is its PC when it was interrupted.
    """

    def __init__(self, pid: int, hz: float = 2000.0) -> None:
        self.pid, self.period = pid, 1.0 / hz
        self._threads: dict[int, _Tracee] = {}
        self._maps: dict[int, tuple[Any, ...]] = {}  # tgid -> (read at, text, *_parse_maps(text))
        self._identities: dict[str, Identity] = {}  # object key -> its file's identity
        self._time: dict[str, float] = {}  # thread-seconds per object
        self._hits: dict[str, int] = {}  # samples per object
        self._seen: set[int] = set()
        self._ticks, self._cpu_s, self._error = 0, 0.0, None
        self._stop, self._attached, self._done = threading.Event(), threading.Event(), threading.Event()
        self._hold_epoch, self._holding, self._quiet_epoch = 0, False, 0
        self._wake = threading.Event()  # ends the sampler's wait for its next tick (stop, hold)
        self._thread = threading.Thread(target=self._run, name=f"pc-sampler-{pid}", daemon=True)
        arch = _REGS.get(platform.machine())
        self._regs = (ctypes.c_uint64 * (arch[0] if arch else 1))()
        self._pc_index = arch[1] if arch else -1

    def start(self) -> None:
        """Attach to every thread; returns once they are all attached (or attaching failed)."""
        self._thread.start()
        self._attached.wait()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until sampling has ended (the process exited, or stop()); True if it has."""
        return self._done.wait(timeout)

    def hold(self) -> None:
        """From now until `release`, keep every thread the sampler stops stopped (see the module doc)."""
        self._hold_epoch += 1
        self._holding = True
        self._wake.set()

    def release(self) -> None:
        """End the hold: kept threads are let go at the sampler's next tick."""
        self._holding = False

    def wait_quiet(self, deadline: float) -> bool:
        """Wait until, under the current hold, every tracee is group-stopped or kept (or sampling has
        ended: the kernel resumed any it kept); False at `deadline` (time.monotonic())."""
        epoch = self._hold_epoch
        while self._quiet_epoch != epoch and not self._done.is_set():
            if time.monotonic() > deadline:
                return False
            time.sleep(50e-6)
        return True

    def stop(self) -> PcSamples:
        """Detach from every thread, leaving each as it was (running or stopped), and report."""
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join()
        return self.snapshot()

    def snapshot(self) -> PcSamples:
        """The samples so far (while sampling goes on, or after stop())."""
        by_object = {name: round(s / self.period) for name, s in dict(self._time).items()}
        by_object = {name: n for name, n in by_object.items() if n}
        return PcSamples(by_object, sum(by_object.values()), len(self._seen), self._error, self._ticks,
                         self._cpu_s, dict(self._hits), identities=dict(self._identities))

    # --- sampler thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            try:
                self._error = self._attach()
            except Exception as exc:  # an attach that throws must still release start()
                self._error = f"attach failed: {exc!r}"
            finally:
                self._attached.set()
            cpu0 = time.thread_time()
            try:
                ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK: 1 us, for short sleeps
            except (OSError, AttributeError):
                pass
            if not self._error:
                self._sample_loop()
            self._detach_all()
            self._cpu_s = time.thread_time() - cpu0
        finally:
            self._done.set()  # tracees still attached are detached and resumed by the kernel when we exit

    def _attach(self) -> str | None:
        if _ptrace_fn is None or self._pc_index < 0:
            return f"ptrace sampling is not supported on {sys.platform}/{platform.machine()}"
        me = threading.get_native_id()
        tried: set[int] = set()
        while True:  # threads can be created while we attach: list again until nothing is new
            try:
                tids = {int(t) for t in os.listdir(f"/proc/{self.pid}/task")} - tried
            except FileNotFoundError:
                return None if self._threads else f"process {self.pid} not found"
            if not tids:
                return None
            for tid in sorted(tids):
                tried.add(tid)
                err = _ptrace(_PTRACE_SEIZE, tid, None, _OPTIONS)
                now = time.monotonic()
                if err == 0:
                    self._threads[tid] = _Tracee(self.pid, since=now, last=now)
                elif tid in self._threads or self._tracer_of(tid) == me:  # auto-attached by a clone
                    self._threads.setdefault(tid, _Tracee(self.pid, "new", since=now, last=now))
                elif tid == self.pid:
                    return f"ptrace(PTRACE_SEIZE) failed: {os.strerror(-err)}"

    def _tracer_of(self, tid: int) -> int:
        try:
            with open(f"/proc/{self.pid}/task/{tid}/status") as f:
                return next((int(line.split()[1]) for line in f if line.startswith("TracerPid:")), 0)
        except (OSError, ValueError):
            return 0

    def _sample_loop(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set() and any(t.tgid == self.pid for t in self._threads.values()):
            self._ticks += 1
            now, holding, epoch = time.monotonic(), self._holding, self._hold_epoch
            for tid, t in list(self._threads.items()):
                if t.state == "held" and (not holding or t.held_in != epoch):
                    _ptrace(_PTRACE_CONT, tid, None, t.held_signal)  # its time kept stopped is nobody's
                    t.state, t.last = "run", now
                elif t.state == "run" and not t.armed and not holding:
                    t.armed, t.since = True, now
                    _ptrace(_PTRACE_INTERRUPT, tid)
                elif t.state == "stop":
                    self._poll(tid, final=False)  # SIGCONT, a signal or an exit while group-stopped
            next_tick = max(next_tick + self.period, now)
            self._collect(next_tick, final=False)
            if holding and all(t.state == "stop" or (t.state == "held" and t.held_in == epoch) for t in self._threads.values()):
                self._quiet_epoch = epoch
            self._wake.wait(max(0.0, next_tick - time.monotonic()))
            self._wake.clear()

    def _detach_all(self) -> None:
        now = time.monotonic()
        for tid, t in list(self._threads.items()):
            if t.state == "held":  # already in a ptrace stop: no interrupt would be reported
                _ptrace(_PTRACE_DETACH, tid, None, t.held_signal)
                self._threads.pop(tid, None)
            elif t.state != "new":
                _ptrace(_PTRACE_INTERRUPT, tid)  # also wakes a listening thread into a stop
                t.armed, t.since = True, now
        self._collect(now + 2.0, final=True)

    def _collect(self, until: float, final: bool) -> None:
        """Take the stops of interrupted and new threads until none is outstanding or `until`."""
        pause = 20e-6
        while True:
            holding = self._holding and not final  # a hold also waits for the stops of running threads
            waiting = [tid for tid, t in self._threads.items() if t.armed or t.state == "new" or (holding and t.state == "run")]
            if not waiting:
                return
            progressed = False
            for tid in waiting:
                progressed |= self._poll(tid, final)
            now = time.monotonic()
            if now >= until:
                return
            if progressed:
                pause = 20e-6
            else:
                time.sleep(min(pause, until - now))
                pause = min(pause * 2, 200e-6)

    def _poll(self, tid: int, final: bool) -> bool:
        """Take one stop or exit of `tid` if there is one; True if something happened."""
        t = self._threads.get(tid)
        if t is None:
            return False
        try:
            status = self._next_event(tid)
            if status is None:
                if t.state == "stop" or time.monotonic() - t.since < _STUCK_S:
                    return False
                state = _proc_state(t.tgid, tid)
                if state in ("", "Z", "X"):  # a zombie leader with live threads, or reaped by someone else
                    self._threads.pop(tid, None)
                    return True
                if state != "t":
                    return False
                status = self._next_event(tid)  # it may just have stopped
                if status is None:  # stopped, but another waiter took the notification
                    status = self._stolen_status(tid)
        except ChildProcessError:
            self._threads.pop(tid, None)
            return True
        if status >= 0:
            self._on_stop(tid, t, status, final)
        return True

    def _next_event(self, tid: int) -> int | None:
        """The status of `tid`'s pending stop (consumed), -1 if it exited, None if nothing happened."""
        try:
            info = os.waitid(os.P_PID, tid, os.WSTOPPED | _WALL | os.WNOHANG)  # a stop; never takes an exit
            if info is not None:
                return info.si_status
        except ChildProcessError:  # the answer for a zombie, which only a wait for exits sees
            pass
        # Peek at exits: this wait reports ptrace stops too, and the child's own exit status is the caller's.
        info = os.waitid(os.P_PID, tid, os.WEXITED | _WALL | os.WNOHANG | os.WNOWAIT)
        if info is None or info.si_code not in (os.CLD_EXITED, os.CLD_KILLED, os.CLD_DUMPED):
            return None  # nothing, or a stop that came just now (taken at the next poll)
        if tid != self.pid:  # reap threads and forked children
            os.waitid(os.P_PID, tid, os.WEXITED | _WALL | os.WNOHANG)
        self._threads.pop(tid, None)
        return -1

    def _stolen_status(self, tid: int) -> int:
        info = (ctypes.c_int * 32)()
        if _ptrace(_PTRACE_GETSIGINFO, tid, None, ctypes.addressof(info)) != 0:
            return _EV_STOP << 8 | signal.SIGTRAP
        signo, code = info[0], info[2]
        return code if code >> 8 and code & 0xFF == signo else signo

    def _on_stop(self, tid: int, t: _Tracee, status: int, final: bool) -> None:
        """Handle one ptrace stop of `tid`: sample it, pass its signal on, and let it go on."""
        sig, event = status & 0xFF, status >> 8
        if event in (_EV_FORK, _EV_VFORK, _EV_CLONE):
            msg = ctypes.c_ulong()
            if _ptrace(_PTRACE_GETEVENTMSG, tid, None, ctypes.addressof(msg)) == 0 and msg.value:
                tgid = msg.value if event != _EV_CLONE else self._tgid(msg.value, t.tgid)
                now = time.monotonic()
                self._threads.setdefault(msg.value, _Tracee(tgid, "new", since=now, last=now))
        elif event == _EV_EXEC:
            self._maps.pop(t.tgid, None)
        if final:
            _ptrace(_PTRACE_DETACH, tid, None, sig if event == 0 else 0)
            self._threads.pop(tid, None)
        elif event == _EV_STOP and sig in _STOP_SIGNALS:  # group stop: stay stopped, let SIGCONT through
            _ptrace(_PTRACE_LISTEN, tid)
            t.state, t.armed = "stop", False
        elif event == _EV_STOP:  # our interrupt, a new thread's first stop, or the wake-up from SIGCONT
            pc = self._pc(tid) if t.armed else None
            held = self._holding
            if not held:
                _ptrace(_PTRACE_CONT, tid, None, 0)  # before the lookup: a stopped thread loses wall time
            if t.armed:
                self._charge(tid, t, pc)
            else:  # its time stopped or not yet started is nobody's
                t.last = time.monotonic()
            t.state, t.armed = "run", False
            if held:
                self._keep(t, 0)
        elif self._holding and not (event == 0 and sig in _STOP_SIGNALS):  # kept, its signal delivered later
            t.armed = False
            self._keep(t, sig if event == 0 else 0)
        else:  # a signal or event stop; it cleared any pending interrupt, so re-arm it while stopped
            if t.armed:
                _ptrace(_PTRACE_INTERRUPT, tid)
            if t.state == "stop":
                t.state, t.last = "run", time.monotonic()
            _ptrace(_PTRACE_CONT, tid, None, sig if event == 0 else 0)

    def _keep(self, t: _Tracee, signal_to_deliver: int) -> None:
        t.state, t.held_in, t.held_signal = "held", self._hold_epoch, signal_to_deliver

    def _tgid(self, tid: int, default: int) -> int:
        try:
            with open(f"/proc/{tid}/status") as f:
                return next((int(line.split()[1]) for line in f if line.startswith("Tgid:")), default)
        except (OSError, ValueError):
            return default

    def _pc(self, tid: int) -> int | None:
        iov = _Iovec(ctypes.addressof(self._regs), ctypes.sizeof(self._regs))
        if _ptrace(_PTRACE_GETREGSET, tid, _NT_PRSTATUS, ctypes.addressof(iov)) != 0:
            return None
        return self._regs[self._pc_index] if iov.len == ctypes.sizeof(self._regs) else -1  # -1: 32-bit

    def _charge(self, tid: int, t: _Tracee, pc: int | None) -> None:
        """Charge the thread's time since its last sample to the object at its PC."""
        weight, t.last = t.since - t.last, t.since
        if pc is None:
            return
        name, identity = self._object_at(t.tgid, pc) if pc >= 0 else ("[unknown]", NO_FILE)
        name = object_key(name, identity, self._identities)
        self._time[name] = self._time.get(name, 0.0) + weight
        self._hits[name] = self._hits.get(name, 0) + 1
        self._seen.add(tid)

    def _object_at(self, tgid: int, pc: int) -> tuple[str, Identity]:
        now = time.monotonic()
        for attempt in range(2):
            cached = self._maps.get(tgid)
            if attempt or cached is None or now - cached[0] > _MAPS_MAX_AGE_S:
                try:
                    with open(f"/proc/{tgid}/maps") as f:
                        text = f.read()
                except OSError:
                    return "[unknown]", NO_FILE
                parsed = cached[1:] if cached is not None and cached[1] == text else (text, *_parse_maps(text))
                cached = (now, *parsed)
                self._maps[tgid] = cached
            found = mapped_object(*cached[2:], pc)
            if found is not None:
                return found
        return "[unknown]", NO_FILE


@functools.cache
def sampling_available() -> bool:
    """Whether this process can ptrace-sample a child here (probed once on a sleeping child)."""
    if _ptrace_fn is None or platform.machine() not in _REGS:
        return False
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sampler = PcSampler(child.pid, hz=1000.0)
        sampler.start()
        time.sleep(0.02)
        samples = sampler.stop()
        return samples.error is None and samples.total > 0
    finally:
        child.kill()
        child.wait()
