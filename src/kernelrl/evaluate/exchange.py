"""How the judge and the candidate process exchange tensors without sharing an address space.

- Inputs and weights travel judge -> candidate in an `Arena`: one anonymous shared-memory file
  (`memfd_create`) holding contiguous tensors, its descriptor passed over a Unix socket (SCM_RIGHTS).
  The candidate maps it and computes on the tensors in place (no copy); the judge keeps private copies
  of everything it wrote, so a candidate that scribbles on the arena changes nothing the judge trusts.
  A `read_only` arena (the timing slots) is sealed before its descriptor leaves the judge
  (F_SEAL_FUTURE_WRITE, SHRINK, GROW, SEAL): the kernel then refuses the candidate every way to write it
  (a writable shared mapping, mprotect of a read-only one, write/pwrite/fallocate, a reopened
  /proc/self/fd), while the judge's own writable mapping, made before the seal, keeps working for refills.
  A candidate that writes its inputs there faults; the judge need not compare them afterwards.
- Outputs travel candidate -> judge by the judge reading the candidate's memory (`read_remote`,
  `process_vm_readv`) at the addresses the call's reply reports, while the candidate is stopped
  (`candidate_process`). A lying address only makes the candidate's own answer wrong; nothing is
  copied inside a timed call but outputs that are not contiguous.
- Other values (ints, tuples, dtypes, ...) travel as tagged JSON (`encode_value` / `decode_value`).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import mmap
import os
import socket
import warnings
from dataclasses import dataclass
from typing import Any

import torch

ALIGN = 64
F_SEAL_FUTURE_WRITE = 0x0010  # Linux >= 5.1; not named by Python's fcntl module
READ_ONLY_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | F_SEAL_FUTURE_WRITE
MAX_LINE_BYTES = 4 * 2**20  # a candidate's reply larger than this is garbage

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
)}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ValueError(f"unsupported tensor dtype {name!r}")
    return _DTYPES[name]


@dataclass
class Slot:
    """Where one tensor lives in an arena."""

    offset: int
    dtype: str
    shape: list[int]

    @property
    def nbytes(self) -> int:
        numel = 1
        for n in self.shape:
            numel *= n
        return numel * dtype_from_name(self.dtype).itemsize


class Arena:
    """Contiguous tensors in one shared-memory file; `tensors[name]` are views into the mapping."""

    def __init__(self, fd: int, size: int, layout: dict[str, Slot], writable: bool = True) -> None:
        self.fd, self.size, self.layout = fd, size, layout
        self._map = mmap.mmap(fd, max(size, ALIGN), prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
        with warnings.catch_warnings():  # a read-only mapping: torch warns that its tensors are not writable
            warnings.simplefilter("ignore", UserWarning)
            base = torch.frombuffer(self._map, dtype=torch.uint8)
        self.tensors: dict[str, torch.Tensor] = {
            name: base[s.offset : s.offset + s.nbytes].view(dtype_from_name(s.dtype)).view(s.shape)
            for name, s in layout.items()
        }

    @classmethod
    def create(cls, tensors: dict[str, torch.Tensor], read_only: bool = False) -> Arena:
        """A new arena holding copies of `tensors` (moved to the CPU, made contiguous). `read_only`: sealed
        against every writer but this mapping (module docstring) before anyone else can hold it."""
        layout, offset = {}, 0
        for name, t in tensors.items():
            layout[name] = Slot(offset, dtype_name(t.dtype), list(t.shape))
            offset += -(-layout[name].nbytes // ALIGN) * ALIGN
        fd = os.memfd_create("kernelrl-arena", os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if read_only else 0))
        os.ftruncate(fd, max(offset, ALIGN))
        for name, t in tensors.items():  # written through the file: no page faults in a fresh mapping
            _write_at(fd, t.detach().to("cpu").contiguous(), layout[name].offset)
        arena = cls(fd, offset, layout)  # the judge's writable mapping, made before the seal
        if read_only:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, READ_ONLY_SEALS)
        return arena

    @staticmethod
    def sealed_read_only(fd: int) -> bool:
        """Whether file `fd` carries the seals of a read-only arena (no new writer can appear)."""
        try:
            return fcntl.fcntl(fd, fcntl.F_GET_SEALS) & READ_ONLY_SEALS == READ_ONLY_SEALS
        except OSError:  # not a memfd, or one created without sealing
            return False

    def describe(self) -> dict[str, Any]:
        return {"size": self.size, "layout": {k: [s.offset, s.dtype, s.shape] for k, s in self.layout.items()}}

    @classmethod
    def attach(cls, fd: int, description: dict[str, Any]) -> Arena:
        """The candidate's side: map an arena received over the socket, checking that the layout fits."""
        size = int(description["size"])
        if os.fstat(fd).st_size < max(size, ALIGN):
            raise ValueError("arena smaller than its layout")
        layout = {k: Slot(int(o), str(d), [int(n) for n in shape]) for k, (o, d, shape) in description["layout"].items()}
        for s in layout.values():
            if s.offset < 0 or s.offset + s.nbytes > size:
                raise ValueError("arena slot out of bounds")
        return cls(fd, size, layout, writable=not cls.sealed_read_only(fd))

    def close(self) -> None:
        self.tensors.clear()
        try:
            self._map.close()
        except BufferError:  # a view is still alive somewhere: the mapping goes with the process
            pass
        os.close(self.fd)


def _write_at(fd: int, t: torch.Tensor, offset: int) -> None:
    """Write a contiguous CPU tensor's bytes into file `fd` at `offset`."""
    nbytes, done = t.numel() * t.element_size(), 0
    if not nbytes:
        return
    view = memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B")
    while done < nbytes:
        done += os.pwrite(fd, view[done:], offset + done)


# -- values -------------------------------------------------------------------------------------------


def encode_value(value: Any, tensors: dict[str, torch.Tensor], prefix: str) -> Any:
    """A JSON form of `value`; tensors are moved into `tensors` under fresh names and referenced."""
    if isinstance(value, torch.Tensor):
        name = f"{prefix}{len(tensors)}"
        tensors[name] = value
        return {"tensor": name}
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v, tensors, prefix) for v in value]}
    if isinstance(value, list):
        return [encode_value(v, tensors, prefix) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: encode_value(v, tensors, prefix) for k, v in value.items()}}
    raise TypeError(f"task value of type {type(value).__name__} cannot cross to the candidate process")


def decode_value(data: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(data, list):
        return [decode_value(v, tensors) for v in data]
    if isinstance(data, dict):
        if "tensor" in data:
            return tensors[data["tensor"]]
        if "dtype" in data:
            return dtype_from_name(data["dtype"])
        if "tuple" in data:
            return tuple(decode_value(v, tensors) for v in data["tuple"])
        return {k: decode_value(v, tensors) for k, v in data["dict"].items()}
    return data


# -- the socket ---------------------------------------------------------------------------------------


class Channel:
    """JSON lines over a Unix stream socket, with file descriptors passed beside a line."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.fds: list[int] = []

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        data = (json.dumps(message) + "\n").encode()
        if fds:
            sent = socket.send_fds(self.sock, [data], fds)
            data = data[sent:]
        if data:
            self.sock.sendall(data)

    def receive(self) -> dict[str, Any] | None:
        """The next message (None at end of stream); fds that came with it are in `self.fds`."""
        line = self.receive_line()
        return None if line is None else parse_message(line)

    def receive_line(self) -> bytes | None:
        """The next message's bytes, not yet parsed (None at end of stream)."""
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self.buffer[:newline])
                del self.buffer[: newline + 1]
                return line
            if len(self.buffer) > MAX_LINE_BYTES:
                raise ValueError(f"message larger than {MAX_LINE_BYTES} bytes")
            data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 16)
            self.fds.extend(fds)
            if not data:
                return None
            self.buffer.extend(data)

    def take_fd(self) -> int:
        if not self.fds:
            raise ValueError("expected a file descriptor with the message")
        return self.fds.pop(0)


def parse_message(line: bytes) -> dict[str, Any]:
    """One JSON object; anything else (nesting too deep for the parser included) is a ValueError."""
    try:
        message = json.loads(line)
    except RecursionError:
        raise ValueError("message nested too deeply") from None
    if not isinstance(message, dict):
        raise ValueError("message is not an object")
    return message


# -- reading the candidate's memory -------------------------------------------------------------------


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.restype = ctypes.c_ssize_t
MAX_IOV = 1024  # IOV_MAX


def read_remote(pid: int, pieces: list[tuple[int, int]], into: int | None = None) -> bytes | None:
    """The bytes at (address, length) pieces of process `pid`'s memory, concatenated: returned, or written
    to local address `into` (which must hold them all; then None is returned).

    Raises OSError when any piece cannot be read (an address the candidate does not map)."""
    if any(not 0 <= a < 2**63 or not 0 <= n < 2**63 for a, n in pieces):
        raise OSError(14, "could not read the candidate's output (address out of range)")
    iov = torch.tensor(pieces, dtype=torch.int64).reshape(-1, 2)
    total = int(iov[:, 1].sum()) if len(pieces) else 0
    out = ctypes.create_string_buffer(max(total, 1)) if into is None else None
    read_remote_iov(pid, iov, ctypes.addressof(out) if out is not None else into)  # type: ignore[arg-type]
    return out.raw[:total] if out is not None else None


def read_remote_iov(pid: int, iov: torch.Tensor, into: int) -> None:
    """Read the (address, length) rows of `iov` (an int64 tensor laid out as `struct iovec[]`) of process
    `pid`'s memory, concatenated, to local address `into`. Raises OSError when any cannot be read."""
    iov = iov.contiguous()
    lengths = iov[:, 1].tolist()
    done = 0
    for start in range(0, len(lengths), MAX_IOV):
        count = min(MAX_IOV, len(lengths) - start)
        want = sum(lengths[start : start + count])
        local = _IoVec(into + done, want)
        remote = ctypes.c_void_p(iov.data_ptr() + start * 16)
        got = _libc.process_vm_readv(pid, ctypes.byref(local), 1, remote, count, 0)
        if got != want:
            err = ctypes.get_errno()
            raise OSError(err, f"could not read the candidate's output ({os.strerror(err) if got < 0 else 'short read'})")
        done += want
