"""Another uid cannot list the native cache or derive a library's path from its source (real builds, real setuid)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kernelrl.native.build as build
from kernelrl.evaluate.builds import BuildService
from kernelrl.evaluate.sandbox import _prepare_cache
from kernelrl.native.build import compiler_for, compiler_identity, default_flags, library_path

OTHER_UID = 54321  # no such user: stands for a candidate's uid
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root")


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache laid out as a pool lays it out, in a directory any uid can reach (pytest's tmp_path is 0700)."""
    root = Path(tempfile.mkdtemp(prefix="kernelrl-privacy-"))
    root.chmod(0o755)
    monkeypatch.setenv("KERNELRL_CACHE_DIR", str(root))
    _prepare_cache(str(root))
    yield root
    shutil.rmtree(root)


def as_other_uid(check) -> dict:
    """Run `check()` in a forked child that dropped to OTHER_UID; its JSON-able result."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            getattr(build, "_KEYS", {}).clear()  # a candidate's process never held the key; this child inherited it
            result = check()
        except BaseException as exc:  # report, never run the parent's code in the child
            result = {"crashed": repr(exc)}
        os.write(write_fd, json.dumps(result).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        data = reader.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def attempt(action) -> str:
    try:
        value = action()
    except OSError as exc:
        return type(exc).__name__
    return f"ok: {value}"


@needs_root
def test_another_uid_can_load_a_library_it_was_sent_but_not_find_or_derive_one(cache: Path) -> None:
    source = f"// {secrets.token_hex(8)}\nextern \"C\" int answer() {{ return 42; }}\n"
    reply = BuildService(None).handle({"source": source, "language": "c++", "flags": []}, time.monotonic() + 60)
    path = Path(reply["path"])
    flags = default_flags("c++")
    unkeyed = hashlib.sha256(json.dumps([source, "c++", flags, compiler_identity(compiler_for("c++"))]).encode())
    native = cache / "native"

    def check() -> dict:
        return {
            "list native": attempt(lambda: os.listdir(native)),
            "list key dir": attempt(lambda: os.listdir(path.parent)),
            "read key": attempt(lambda: (cache / "native.key").read_bytes()),
            "derive": attempt(lambda: str(library_path(source, "c++", flags))),
            "unkeyed name": attempt(lambda: os.stat(native / unkeyed.hexdigest()[:2] / f"{unkeyed.hexdigest()}.so")),
            "load sent path": attempt(lambda: ctypes.CDLL(str(path)).answer()),
        }

    result = as_other_uid(check)
    assert result == {
        "list native": "PermissionError",
        "list key dir": "PermissionError",
        "read key": "PermissionError",
        "derive": "PermissionError",
        "unkeyed name": "FileNotFoundError",
        "load sent path": "ok: 42",
    }, result
    assert stat.S_IMODE(native.stat().st_mode) == 0o711 and stat.S_IMODE(path.parent.stat().st_mode) == 0o711
    key = (cache / build.KEY_FILE).stat()
    assert key.st_uid == 0 and stat.S_IMODE(key.st_mode) == 0o600


@needs_root
def test_a_key_file_someone_else_could_know_is_replaced(cache: Path) -> None:
    key_path = cache / build.KEY_FILE
    planted = secrets.token_bytes(32)
    key_path.unlink()
    key_path.write_bytes(planted)
    os.chown(key_path, OTHER_UID, OTHER_UID)  # written by a candidate's uid
    build._KEYS.clear()
    _prepare_cache(str(cache))
    assert key_path.read_bytes() != planted
    info = key_path.stat()
    assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o600
    key_path.chmod(0o644)  # readable by all: also replaced, by the next process that uses it
    build._KEYS.clear()
    first = key_path.read_bytes()
    build.native_key(cache)
    assert key_path.read_bytes() != first and stat.S_IMODE(key_path.stat().st_mode) == 0o600
