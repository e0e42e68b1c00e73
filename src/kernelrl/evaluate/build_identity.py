"""Which native code the build broker built: identities recorded by the broker, checked by the judge.

The judge attributes a profile sample to the candidate's own code only when the sampled mapping is a
library the broker built (`evaluate.builds`), told by the mapped file's identity, never by its path: a
copy of a BLAS library in the candidate's work directory, Inductor's generated code or anything the
candidate process compiled or wrote itself is someone else's compute, wherever it lies.

`record_identity` (the broker, for every library it produces or serves) writes one record per library
under `native/.identity/`, named by the (st_dev, st_ino) that /proc/PID/maps shows for the file mapped
(taken from a mapping of it, so it is the same on overlay filesystems, where maps and stat can differ),
holding the library's path, stat identity, size, ctime and SHA-256. `BrokerBuilds` (the judge) says
whether an identity seen in the candidate's maps is such a library: the record and the library must be
regular files the judge's own uid owns and no one else can write, the library must still have the
recorded identity, size and ctime, and its content the recorded hash. Only the broker's uid can write
`native/` under bubblewrap as root; where the candidate shares that uid, it could forge records, as it
could write the cache itself (DESIGN.md, "What remains").
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
import stat
from pathlib import Path

Identity = tuple[int, int]  # (st_dev, st_ino) of a mapped file, as /proc/PID/maps reports it
NO_FILE: Identity = (0, 0)  # anonymous memory, [vdso], [heap], ...
REGISTRY = ".identity"
MAX_RECORD_BYTES = 64 * 1024
MAX_LIBRARY_BYTES = 1 << 30
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # never a link, never a FIFO's wait


def maps_identity_of_device(field: str, inode: str) -> Identity:
    """(st_dev, st_ino) from a maps line's `major:minor` (hex) and inode fields."""
    major, _, minor = field.partition(":")
    try:
        return os.makedev(int(major, 16), int(minor, 16)), int(inode)
    except ValueError:
        return NO_FILE


def mapped_identity(fd: int) -> Identity | None:
    """The identity /proc/self/maps shows for the open regular file `fd` once mapped (None if empty)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None
    with mmap.mmap(fd, min(size, mmap.PAGESIZE), flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) as view:
        anchor = ctypes.c_char.from_buffer(view)
        address = ctypes.addressof(anchor)
        del anchor
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(maxsplit=5)
                if len(parts) >= 5 and int(parts[0].split("-")[0], 16) == address:
                    return maps_identity_of_device(parts[3], parts[4])
    return None


def _digest(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _record_path(native: Path, identity: Identity) -> Path:
    return native / REGISTRY / f"{identity[0]}-{identity[1]}.json"


def _owned_regular(st: os.stat_result) -> bool:
    """A regular file of this process's uid that neither group nor others can write."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def record_identity(library: Path, native: Path) -> Identity | None:
    """Record `library` (a file the broker just produced or served, under `native`) as broker-built;
    returns its maps identity. A record that still matches the file is left as it is (a cached hit costs
    a stat and a small read); a library that is not a regular file of ours is not recorded."""
    fd = os.open(library, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not _owned_regular(st):
            return None
        identity = mapped_identity(fd)
        if identity is None:
            return None
        target = _record_path(native, identity)
        existing = _read_record(target)
        if existing is not None and existing.get("path") == str(library) and _same_file(existing, st):
            return identity
        record = {"path": str(library), "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
                  "ctime_ns": st.st_ctime_ns, "sha256": _digest(fd)}
    finally:
        os.close(fd)
    os.makedirs(target.parent, mode=0o711, exist_ok=True)
    scratch = target.with_name(f".{target.name}.{os.getpid()}")
    with open(scratch, "w") as out:
        json.dump(record, out)
    os.chmod(scratch, 0o644)
    os.replace(scratch, target)
    return identity


def _read_record(path: Path) -> dict | None:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not _owned_regular(st) or st.st_size > MAX_RECORD_BYTES:
            return None
        record = json.loads(os.read(fd, MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return record if isinstance(record, dict) else None


def _same_file(record: dict, st: os.stat_result) -> bool:
    return (record.get("dev"), record.get("ino"), record.get("size"), record.get("ctime_ns")) == (
        st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns)


class BrokerBuilds:
    """The set of identities of libraries the broker built (`identity in builds`), checked lazily and
    remembered for the judge's lifetime."""

    def __init__(self, native: Path) -> None:
        self.native = Path(native)
        self._known: dict[Identity, bool] = {}

    def __contains__(self, identity: object) -> bool:
        if not isinstance(identity, tuple) or identity == NO_FILE:
            return False
        if identity not in self._known:
            self._known[identity] = self._verify(identity)
        return self._known[identity]

    def _verify(self, identity: Identity) -> bool:
        record = _read_record(_record_path(self.native, identity))
        if record is None or not isinstance(record.get("path"), str) or not isinstance(record.get("sha256"), str):
            return False
        library = os.path.normpath(record["path"])
        root = os.path.normpath(self.native)
        if os.path.commonpath([library, root]) != root or f"/{REGISTRY}/" in library:
            return False
        try:
            fd = os.open(library, _OPEN_FLAGS)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if not _owned_regular(st) or not _same_file(record, st) or st.st_size > MAX_LIBRARY_BYTES:
                return False
            return _digest(fd) == record["sha256"]
        except OSError:
            return False
        finally:
            os.close(fd)


def file_identities(paths: list[Path] | list[str]) -> frozenset[Identity]:
    """Maps identities of the given files (tests, and profiles of libraries built outside the broker)."""
    found = set()
    for path in paths:
        fd = os.open(path, _OPEN_FLAGS)
        try:
            identity = mapped_identity(fd)
        finally:
            os.close(fd)
        if identity is not None:
            found.add(identity)
    return frozenset(found)


def runtime_identities(maps: str = "/proc/self/maps") -> frozenset[Identity]:
    """Identities of the files mapped executable in this process (the judge: forked from a supervisor
    that loaded the interpreter, libc, torch and numpy before any candidate existed)."""
    found = set()
    with open(maps) as text:
        for line in text:
            parts = line.split(maxsplit=5)
            if len(parts) > 5 and "x" in parts[1] and parts[5].startswith("/"):
                found.add(maps_identity_of_device(parts[3], parts[4]))
    found.discard(NO_FILE)
    return frozenset(found)


def broker_builds() -> BrokerBuilds:
    """The broker's records in this machine's build cache (`kernelrl.native.cache_dir()`)."""
    from kernelrl.native.build import cache_dir

    return BrokerBuilds(cache_dir() / "native")
