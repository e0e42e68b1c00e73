"""Own code by identity: the broker's records of its libraries, and the judge's check of them."""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

import pytest

from kernelrl.evaluate.build_identity import (
    BrokerBuilds,
    file_identities,
    record_identity,
    runtime_identities,
)
from kernelrl.evaluate.sampler import PcSamples, _parse_maps, classify, mapped_object


@pytest.fixture()
def native(tmp_path: Path) -> Path:
    """A cache's native/ with one "library" (any ELF file serves: only its bytes and identity matter)."""
    root = tmp_path / "native"
    (root / "ab").mkdir(parents=True)
    shutil.copy(_libm(), root / "ab" / "lib.so")
    return root


def _libm() -> str:
    with open("/proc/self/maps") as maps:
        return next(line.split()[-1] for line in maps if "/libm.so" in line or "/libm-" in line)


def test_recorded_library_is_own_by_identity_not_by_path(native: Path, tmp_path: Path) -> None:
    library = native / "ab" / "lib.so"
    identity = record_identity(library, native)
    assert identity is not None and identity in BrokerBuilds(native)
    assert record_identity(library, native) == identity  # a hit leaves the record as it is
    copy = tmp_path / "copy.so"  # same bytes, another file: not a broker build
    shutil.copy(library, copy)
    assert not file_identities([copy]) & {identity}
    assert next(iter(file_identities([copy]))) not in BrokerBuilds(native)


def test_changed_or_replaced_library_is_not_own(native: Path) -> None:
    library = native / "ab" / "lib.so"
    identity = record_identity(library, native)
    with open(library, "r+b") as f:  # same inode, other bytes
        f.seek(100)
        f.write(b"\x90" * 16)
    assert identity not in BrokerBuilds(native)
    record_identity(library, native)
    assert identity in BrokerBuilds(native)
    os.chmod(library, 0o666)  # writable by others: whatever it holds now is no one's build
    assert identity not in BrokerBuilds(native)


def test_record_pointing_outside_the_cache_is_refused(native: Path, tmp_path: Path) -> None:
    import json

    outside = tmp_path / "outside.so"
    shutil.copy(native / "ab" / "lib.so", outside)
    identity = record_identity(outside, tmp_path)  # a record written under another root
    assert identity is not None
    record = tmp_path / ".identity" / f"{identity[0]}-{identity[1]}.json"
    (native / ".identity").mkdir(exist_ok=True)
    shutil.copy(record, native / ".identity" / record.name)
    assert json.loads(record.read_text())["path"] == str(outside)
    assert identity not in BrokerBuilds(native)


def test_maps_identity_classifies_a_mapped_library(native: Path) -> None:
    """The identity a sampler reads from /proc/PID/maps is the one the broker recorded."""
    library = native / "ab" / "lib.so"
    identity = record_identity(library, native)
    handle = ctypes.CDLL(str(library))
    with open("/proc/self/maps") as maps:
        parsed = _parse_maps(maps.read())
    start = next(s for s, name in zip(parsed[0], parsed[2], strict=True) if name == str(library))
    name, seen = mapped_object(*parsed, start)
    assert (name, seen) == (str(library), identity)
    samples = PcSamples({name: 9, "/usr/lib/libc.so.6": 3}, 12, 1, identities={name: seen, "/usr/lib/libc.so.6": (1, 2)})
    coverage = classify(samples, BrokerBuilds(native), runtime_identities())
    assert (coverage.own, coverage.fallback) == (9, 3)  # a libc that the judge has not mapped is no runtime
    del handle
