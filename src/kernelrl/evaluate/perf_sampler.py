"""Kernel-driven instruction-pointer sampling of a candidate process (`perf_event_open`, task clock).

The kernel samples each thread of the candidate every `1/hz` seconds of that thread's own CPU time and
writes (ip, pid, tid) records to a ring buffer the judge maps; nothing of the judge has to run, or win
a CPU, for a sample to be taken. That is what the ptrace sampler (`evaluate.sampler`) cannot promise:
on a loaded machine its thread is starved exactly while the candidate computes, and its samples then
land in the candidate's idle waits. Here a sample is CPU time by construction, blocked time is never
sampled, and the candidate is never stopped (its timing is not disturbed by the profile).

User-mode samples only (`exclude_kernel`, allowed at perf_event_paranoid 2 for a process the judge may
ptrace). One event per thread that exists at start and CPU the candidate may run on, each with `inherit`
(threads and children created later are counted too), redirected into one buffer per CPU. The events are the
judge's: `prctl(PR_TASK_PERF_EVENTS_DISABLE)` acts on the events the caller owns, and the candidate's
seccomp filter denies it anyway (`evaluate.confine`).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import platform
import struct
import time
from typing import Any

from kernelrl.evaluate.build_identity import NO_FILE, Identity
from kernelrl.evaluate.sampler import (
    PcSampler,
    PcSamples,
    _parse_maps,
    mapped_object,
    object_key,
    sampling_available,
)

_SYSCALL_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
_PERF_TYPE_SOFTWARE, _PERF_COUNT_SW_TASK_CLOCK = 1, 1
_SAMPLE_IP, _SAMPLE_TID = 1 << 0, 1 << 1
_FLAG_INHERIT, _FLAG_EXCLUDE_KERNEL, _FLAG_EXCLUDE_HV = 1 << 1, 1 << 5, 1 << 6
_FLAG_DISABLED = 1 << 0
_IOC_ENABLE, _IOC_DISABLE, _IOC_SET_OUTPUT = 0x2400, 0x2401, 0x2405
_RECORD_SAMPLE, _RECORD_LOST = 9, 2
_FLAG_FD_CLOEXEC = 8  # PERF_FLAG_FD_CLOEXEC
_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7: the fields set here all sit in the first 48 bytes
_DATA_PAGES = 64  # 256 KiB of records: ~10 k samples between two drains
_HEAD_OFFSET, _TAIL_OFFSET = 1024, 1032  # data_head, data_tail in struct perf_event_mmap_page


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.ioctl.restype = ctypes.c_int
    return libc


def _open_event(tid: int, cpu: int, period_ns: int) -> int:
    """A disabled task-clock sampling event on thread `tid` while on `cpu`, inherited by the threads and
    children it creates; returns the fd or -errno."""
    number = _SYSCALL_PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        return -38  # ENOSYS
    attr = bytearray(_ATTR_SIZE)
    flags = _FLAG_EXCLUDE_KERNEL | _FLAG_EXCLUDE_HV | _FLAG_INHERIT | _FLAG_DISABLED
    # type, size, config, sample_period, sample_type, read_format, flags
    struct.pack_into("=IIQQQQQ", attr, 0, _PERF_TYPE_SOFTWARE, _ATTR_SIZE, _PERF_COUNT_SW_TASK_CLOCK,
                     period_ns, _SAMPLE_IP | _SAMPLE_TID, 0, flags)
    buffer = (ctypes.c_char * _ATTR_SIZE).from_buffer(attr)
    libc = _libc()
    fd = libc.syscall(number, buffer, tid, cpu, -1, ctypes.c_ulong(_FLAG_FD_CLOEXEC))
    return fd if fd >= 0 else -ctypes.get_errno()


class PerfSampler:
    """Samples the user-mode PC of every thread of process `pid` every 1/`hz` s of its CPU time.

    Same interface as `PcSampler`: start(), snapshot(), stop() -> PcSamples. `by_object` and `hits` are
    both sample counts (every sample stands for one period of CPU time).
    """

    def __init__(self, pid: int, hz: float = 1000.0) -> None:
        self.pid, self.period_ns = pid, max(10_000, int(1e9 / hz))
        self._fds: list[int] = []
        self._rings: list[mmap.mmap] = []
        self._hits: dict[str, int] = {}
        self._tids: set[int] = set()
        self._maps: dict[int, tuple[Any, ...]] = {}  # pid -> (text, *_parse_maps(text))
        self._identities: dict[str, Identity] = {}  # object key -> its file's identity
        self._lost = 0
        self._error: str | None = None
        self._samples = 0

    def start(self) -> None:
        """Open and enable one event per (existing thread, allowed CPU); on failure stop() reports why.

        The kernel maps an inherited event's buffer only when the event is bound to a CPU, so events are
        per CPU of the candidate's affinity (which it cannot change: sched_setaffinity is denied), one ring
        per CPU."""
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task"))
            cpus = sorted(os.sched_getaffinity(self.pid))
        except OSError as exc:
            self._error = f"process {self.pid} not found: {exc}"
            return
        libc = _libc()
        for cpu in cpus:
            first = -1
            for tid in tids:
                fd = _open_event(tid, cpu, self.period_ns)
                if fd < 0:
                    if tid == self.pid:
                        self._error = f"perf_event_open failed: {os.strerror(-fd)}"
                        self.close()
                        return
                    continue  # a thread that ended meanwhile
                self._fds.append(fd)
                if first < 0:
                    first = fd
                    try:
                        self._rings.append(mmap.mmap(fd, (1 + _DATA_PAGES) * mmap.PAGESIZE, mmap.MAP_SHARED,
                                                     mmap.PROT_READ | mmap.PROT_WRITE))
                    except OSError as exc:
                        self._error = f"mapping the perf ring buffer failed: {exc}"
                        self.close()
                        return
                elif libc.ioctl(fd, _IOC_SET_OUTPUT, first) != 0:
                    self._error = f"PERF_EVENT_IOC_SET_OUTPUT failed: {os.strerror(ctypes.get_errno())}"
                    self.close()
                    return
        for fd in self._fds:
            libc.ioctl(fd, _IOC_ENABLE, 0)

    def snapshot(self) -> PcSamples:
        """The samples so far (drains the ring buffer)."""
        self._drain()
        hits = dict(self._hits)
        return PcSamples(hits, sum(hits.values()), len(self._tids), self._error, self._samples, 0.0, dict(hits),
                         lost=self._lost, method="perf", identities=dict(self._identities))

    def stop(self) -> PcSamples:
        """Disable the events, take the last samples and close everything."""
        libc = _libc()
        for fd in self._fds:
            libc.ioctl(fd, _IOC_DISABLE, 0)
        samples = self.snapshot()
        self.close()
        return samples

    def close(self) -> None:
        for ring in self._rings:
            ring.close()
        self._rings = []
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    # --- records --------------------------------------------------------------------------------------

    def _drain(self) -> None:
        for ring in self._rings:
            self._drain_ring(ring)

    def _drain_ring(self, ring: mmap.mmap) -> None:
        page, size = mmap.PAGESIZE, _DATA_PAGES * mmap.PAGESIZE
        head = struct.unpack_from("=Q", ring, _HEAD_OFFSET)[0]
        tail = struct.unpack_from("=Q", ring, _TAIL_OFFSET)[0]
        if head - tail > size:  # cannot happen with a writable mapping (the kernel stops at the tail)
            tail = head - size
        data = bytearray()
        start, end = tail % size, head % size
        if head - tail:
            if start < end:
                data += ring[page + start : page + end]
            else:
                data += ring[page + start : page + size] + ring[page : page + end]
        struct.pack_into("=Q", ring, _TAIL_OFFSET, head)  # the kernel may reuse what was read
        offset = 0
        while offset + 8 <= len(data):
            kind, _, length = struct.unpack_from("=IHH", data, offset)
            if length < 8:
                break
            if kind == _RECORD_SAMPLE and length >= 24:
                ip, pid, tid = struct.unpack_from("=QII", data, offset + 8)
                self._count(ip, pid, tid)
            elif kind == _RECORD_LOST and length >= 24:
                self._lost += struct.unpack_from("=Q", data, offset + 16)[0]
            offset += length

    def _count(self, ip: int, pid: int, tid: int) -> None:
        name = object_key(*self._object_at(pid, ip), self._identities)
        self._hits[name] = self._hits.get(name, 0) + 1
        self._tids.add(tid)
        self._samples += 1

    def _object_at(self, pid: int, ip: int) -> tuple[str, Identity]:
        """The file mapped at `ip` in process `pid` and its identity; a process that has exited by now (a forked helper) is
        looked up in the candidate's maps, which it inherited. Code found in no mapping counts as "[anon]"
        (fallback compute): user-mode code that cannot be attributed must not look like overhead."""
        for who in dict.fromkeys((pid, self.pid)):
            for attempt in range(2):
                cached = self._maps.get(who)
                if cached is None or attempt:
                    try:
                        with open(f"/proc/{who}/maps") as f:
                            text = f.read()
                    except OSError:
                        break
                    cached = (text, *_parse_maps(text))
                    self._maps[who] = cached
                found = mapped_object(*cached[1:], ip)
                if found is not None:
                    return found
        return "[anon]", NO_FILE


def perf_sampling_available() -> bool:
    """Whether task-clock sampling of a child works here (probed on a busy child for ~50 ms)."""
    import subprocess
    import sys

    if platform.machine() not in _SYSCALL_PERF_EVENT_OPEN:
        return False
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sampler = PerfSampler(child.pid, hz=1000.0)
        sampler.start()
        deadline = time.monotonic() + 1.0
        samples = sampler.snapshot()
        while samples.error is None and samples.total < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
            samples = sampler.snapshot()
        samples = sampler.stop()
        return samples.error is None and samples.total >= 5
    finally:
        child.kill()
        child.wait()


@functools.cache
def sampling_method() -> str | None:
    """How this machine samples a candidate: "perf" (kernel-driven, preferred), "ptrace" (a judge thread
    interrupts the candidate; starved on a loaded machine) or None. Probed once per process."""
    if perf_sampling_available():
        return "perf"
    return "ptrace" if sampling_available() else None


def start_sampler(pid: int, hz: float) -> PerfSampler | PcSampler | None:
    """A started sampler of process `pid` by `sampling_method()`; a perf sampler that fails to start
    (another process's limits) gives way to ptrace."""
    method = sampling_method()
    if method == "perf":
        sampler = PerfSampler(pid, hz=hz)
        sampler.start()
        if sampler._error is None:
            return sampler
        sampler.close()
    if method is None:
        return None
    fallback = PcSampler(pid, hz=hz)
    fallback.start()
    return fallback
