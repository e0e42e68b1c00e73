"""Read-only arenas (the timing slots) hold against a process that has the arena's descriptor and native
code: a real child process tries every way to write one (a writable shared mapping, mprotect of a
read-only one, pwrite, a reopened /proc/self/fd, truncation, a punched hole); each is refused, a store
through its mapping kills it with SIGSEGV, and the judge's own mapping still writes (refills)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import torch

from kernelrl.evaluate.exchange import Arena

ATTACKER = r"""
import ctypes, json, mmap, os, sys
fd, size = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
outcomes = {}
def attempt(name, fn):
    try:
        fn()
        outcomes[name] = "allowed"
    except OSError as exc:
        outcomes[name] = f"refused ({exc.errno})"
def check(ret):
    if ret in (-1, None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "refused")
attempt("shared writable mapping", lambda: mmap.mmap(fd, size, prot=mmap.PROT_READ | mmap.PROT_WRITE))
attempt("pwrite", lambda: os.pwrite(fd, b"\0" * 8, 0))
attempt("ftruncate", lambda: os.ftruncate(fd, 0))
attempt("punch a hole", lambda: check(libc.fallocate(fd, 3, ctypes.c_long(0), ctypes.c_long(4096))))
reopened = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
attempt("reopened shared writable mapping", lambda: mmap.mmap(reopened, size, prot=mmap.PROT_READ | mmap.PROT_WRITE))
attempt("reopened pwrite", lambda: os.pwrite(reopened, b"\0" * 8, 0))
address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
attempt("mprotect to writable", lambda: check(libc.mprotect(ctypes.c_void_p(address), size, mmap.PROT_READ | mmap.PROT_WRITE)))
attempt("madvise remove", lambda: check(libc.madvise(ctypes.c_void_p(address), size, 9)))
outcomes["first value seen"] = ctypes.c_float.from_address(address).value
print(json.dumps(outcomes), flush=True)
ctypes.c_float.from_address(address).value = 0.0  # a plain store through the read-only mapping
print("stored", flush=True)
"""


def test_a_read_only_arena_cannot_be_written_by_anyone_but_the_judge() -> None:
    values = torch.arange(1.0, 1025.0)
    arena = Arena.create({"x": values}, read_only=True)
    try:
        arena.tensors["x"][0] = 42.0  # the judge refills through the mapping it made before the seal
        proc = subprocess.run([sys.executable, "-c", ATTACKER, str(arena.fd), str(arena.size)], pass_fds=[arena.fd],
                              capture_output=True, text=True, timeout=60)
        outcomes = json.loads(proc.stdout.splitlines()[0])
        assert outcomes.pop("first value seen") == 42.0
        assert all(v.startswith("refused") for v in outcomes.values()), outcomes
        assert proc.returncode == -signal.SIGSEGV and "stored" not in proc.stdout
        assert torch.equal(arena.tensors["x"][1:], values[1:]) and os.fstat(arena.fd).st_size == arena.size
    finally:
        arena.close()


def test_the_candidate_side_maps_a_sealed_arena_read_only_and_others_writable() -> None:
    sealed, plain = Arena.create({"x": torch.ones(16)}, read_only=True), Arena.create({"x": torch.ones(16)})
    try:
        assert Arena.sealed_read_only(sealed.fd) and not Arena.sealed_read_only(plain.fd)
        seen = Arena.attach(os.dup(sealed.fd), sealed.describe())
        assert torch.equal(seen.tensors["x"], torch.ones(16)) and seen._map.write is not None
        try:
            seen._map[0:1] = b"\0"
            raise AssertionError("a read-only mapping took a write")
        except TypeError:  # mmap refuses writes to a PROT_READ mapping before they reach memory
            pass
        seen.close()
        writable = Arena.attach(os.dup(plain.fd), plain.describe())
        writable.tensors["x"][0] = 3.0
        assert plain.tensors["x"][0] == 3.0
        writable.close()
    finally:
        sealed.close()
        plain.close()
