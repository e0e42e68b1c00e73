"""The supervisor's build service: evaluated children ask for kernel builds instead of writing the cache.

The shared native cache is writable only by the supervisor. A child sends `{source, language, flags}`
over a pipe; the supervisor computes the cache key itself, answers a hit at once, and on a miss runs
the compiler (as the slot's build uid, which is not the candidate's uid, when the sandbox can drop
privileges; under rlimits; refusing unsafe flags and includes) in a private directory, then moves the
library into the cache. Since the key covers the whole request and candidate code never touches the
compiler or its output, what lands under a key is the real build of that request. The key is keyed
with a secret only the supervisors can read and the cache's directories cannot be listed, so a
candidate can load only the libraries whose paths it was sent. A request that is not well-formed is
treated as a forged message.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelrl.evaluate.build_identity import record_identity
from kernelrl.native.build import (
    BUILD_TIMEOUT_S,
    SOURCE_NAME,
    CompileError,
    as_uid,
    compiler_for,
    default_flags,
    library_path,
    run_compiler,
)
from kernelrl.native.hardening import flag_refusal
from kernelrl.native.pch import PrecompiledHeaders

MAX_REQUEST_BYTES = 4 * 2**20
MAX_FLAGS = 64


class BadRequest(ValueError):
    """The child sent something that no honest build client sends."""


def parse_request(message: dict[str, Any]) -> tuple[str, str, list[str]]:
    """`(source, language, extra flags)` of a build request, or BadRequest."""
    source, language, flags = message.get("source"), message.get("language"), message.get("flags")
    if set(message) != {"source", "language", "flags"}:
        raise BadRequest(f"unexpected fields {sorted(message)}")
    if not isinstance(source, str) or language not in SOURCE_NAME:
        raise BadRequest("source must be a string and language 'c++' or 'cuda'")
    if not isinstance(flags, list) or len(flags) > MAX_FLAGS or not all(isinstance(f, str) for f in flags):
        raise BadRequest(f"flags must be a list of at most {MAX_FLAGS} strings")
    return source, language, flags


class BuildService:
    """Builds for one supervisor; `uid` is the uid/gid its compiler runs as (None: the supervisor's own)."""

    def __init__(self, uid: int | None) -> None:
        self.uid = uid
        self.headers: PrecompiledHeaders | None = None

    def handle(self, message: dict[str, Any], deadline: float) -> dict[str, Any] | None:
        """The reply to one request; None when the stage `deadline` passed first. Raises BadRequest."""
        source, language, extra = parse_request(message)
        file_name = SOURCE_NAME[language]

        def error(text: str, log: str = "") -> dict[str, Any]:
            return {"message": text, "log": log, "file_name": file_name}

        for flag in extra:
            refusal = flag_refusal(flag, language)
            if refusal is not None:
                return error(refusal)
        try:
            compiler = compiler_for(language)
            flags = [*default_flags(language), *extra]
            target = library_path(source, language, flags)
        except CompileError as exc:  # no such compiler here
            return error(str(exc))
        if _trusted(target):
            _record(target)
            return {"path": str(target)}
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        native = target.parent.parent
        os.makedirs(target.parent, mode=0o711, exist_ok=True)  # traversable, not listable: names stay secret
        workdir = tempfile.mkdtemp(prefix=".build-", dir=native)
        try:
            if self.uid is not None:
                os.chown(workdir, self.uid, self.uid)
            if self.headers is None:
                self.headers = PrecompiledHeaders(native.parent / "pch", self.uid)
            precompiled = self.headers.header_for(source, language, flags)
            remaining = deadline - time.monotonic()
            try:
                out_path, _ = run_compiler(source, language, flags, workdir, min(remaining, BUILD_TIMEOUT_S), self.uid,
                                           precompiled=precompiled)
            except TimeoutError:
                if remaining <= BUILD_TIMEOUT_S:
                    return None  # the stage limit ran out: the supervisor times the child out
                return error(f"{compiler} timed out after {BUILD_TIMEOUT_S:.0f} s")
            except CompileError as exc:
                return error(exc.message, exc.log)
            finally:
                if self.uid is not None:
                    kill_all_of(self.uid)
            if not _adopt(out_path):
                return error(f"{compiler} made no regular library file")
            os.replace(out_path, target)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        _record(target)
        return {"path": str(target)}


def _adopt(path: Path) -> bool:
    """Make the compiler's output the supervisor's (0644) through an fd opened without following links,
    once nothing of the build uid runs: a link or FIFO put in its place is refused, never chowned."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # not a hard link to someone else's file
            return False
        os.fchown(fd, os.geteuid(), os.getegid())
        os.fchmod(fd, 0o644)
        return True
    finally:
        os.close(fd)


def _record(target: Path) -> None:
    """Record the library's identity (`evaluate.build_identity`): the judge counts profile samples as the
    candidate's own code only in libraries so recorded. A record that cannot be written only costs the
    candidate its coverage."""
    try:
        record_identity(target, target.parent.parent)
    except OSError:
        pass


def _trusted(path: Path) -> bool:
    """A cached library that this supervisor's uid owns and only it can change."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022 and os.path.isfile(path)


def kill_all_of(uid: int) -> None:
    """SIGKILL every process of `uid` (a compiler that left something behind): `kill -9 -1` run as `uid`
    reaches exactly the processes of that uid."""
    command, as_user = as_uid(["kill", "-9", "-1"], uid)
    subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False, **as_user)


def send_reply(fd: int, data: bytes, deadline: float) -> bool:
    """Write `data` to the non-blocking `fd` before `deadline`; False if the child stopped reading or left."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            timeout = deadline - time.monotonic()
            if timeout <= 0 or not select.select([], [fd], [], timeout)[1]:
                return False
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                return False
            raise
    return True
