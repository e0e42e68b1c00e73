"""Newline-delimited JSON messages over pipes (never pickle: the other side may be hostile)."""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

MAX_MESSAGE_BYTES = 64 * 2**20


class ProtocolError(RuntimeError):
    pass


def write_message(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class MessageReader:
    """Reads JSON lines from a file descriptor with deadlines; `None` means end of stream."""

    def __init__(self, fd: int, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.fd = fd
        self.max_bytes = max_bytes
        self.buffer = bytearray()
        self.closed = False

    def buffered(self) -> dict[str, Any] | None:
        """The next complete message already read, if any (ProtocolError if it is not a JSON object)."""
        newline = self.buffer.find(b"\n")
        if newline < 0:
            return None
        line = bytes(self.buffer[:newline])
        del self.buffer[: newline + 1]
        try:
            message = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"malformed message: {exc}") from None
        if not isinstance(message, dict):
            raise ProtocolError("malformed message: not an object")
        return message

    def fill(self) -> None:
        """One read from the fd (which must be readable); sets `closed` at end of stream."""
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.closed = True
            return
        self.buffer.extend(chunk)
        if len(self.buffer) > self.max_bytes:
            raise ProtocolError(f"message larger than {self.max_bytes} bytes")

    def read(self, deadline: float | None) -> dict[str, Any] | None:
        """The next message; raises TimeoutError past `deadline` (a time.monotonic() value)."""
        while True:
            message = self.buffered()
            if message is not None:
                return message
            if self.closed:
                return None
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                raise TimeoutError
            self.fill()
