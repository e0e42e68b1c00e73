"""Precompiled headers for g++ builds: the standard headers a kernel includes, parsed once, not per build.

A typical kernel opens with `#include <cmath>`, `<cstdint>`, `<cstring>`: parsing those takes half of a
0.2 s build. When a source opens with a block of system includes (`leading_includes`: nothing but
blank lines, `//` comments and `#include <name>` of known standard headers, and at least one header that
is not trivial to parse), the build service compiles exactly that block, in that order and with the
build's own flags, into a precompiled header, and later builds that open with the same block get
`-include` of it. The compiled program is the same as without it: the same headers, in the same order,
before the same code (the source's own includes are then no-ops behind their include guards).

A header is built the second time its block is seen by a service (one-off blocks never pay the ~1-2 s),
by the compiler as the build uid under the build limits, in a private directory, then made read-only
and owned by the service before it is moved into `<cache>/pch/<key>/`; the key covers the block, the
flags and the compiler's identity. A block whose header fails to build is not tried again.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from kernelrl.native.build import compiler_for, compiler_identity, limited
from kernelrl.native.hardening import BuildLimits

PCH_TIMEOUT_S = 60.0
HEADER_NAME = "block.h"
# Headers that cost (almost) nothing to parse: a block of only these gains nothing from a precompiled one.
TRIVIAL = frozenset({"cstdint", "stdint.h", "cstddef", "stddef.h", "climits", "limits.h", "cfloat", "float.h",
                     "cstdbool", "stdbool.h", "inttypes.h", "cinttypes"})
STANDARD = TRIVIAL | frozenset({
    "algorithm", "array", "atomic", "bitset", "cassert", "cctype", "cerrno", "chrono", "cmath", "complex",
    "cstdio", "cstdlib", "cstring", "deque", "functional", "initializer_list", "iterator", "limits", "list",
    "map", "memory", "new", "numeric", "optional", "queue", "random", "set", "stack", "string", "tuple",
    "type_traits", "unordered_map", "unordered_set", "utility", "vector", "assert.h", "math.h", "stdio.h",
    "stdlib.h", "string.h", "omp.h", "immintrin.h", "x86intrin.h", "xmmintrin.h", "emmintrin.h", "pmmintrin.h",
    "smmintrin.h", "nmmintrin.h", "arm_neon.h",
})
_INCLUDE = re.compile(r"#\s*include\s*<([A-Za-z0-9_./]+)>\s*(//.*)?")


def leading_includes(source: str) -> str | None:
    """The block of `#include <...>` lines a source opens with (one per line, in order), or None when the
    opening is anything else, names a header outside STANDARD, or holds only TRIVIAL ones."""
    names: list[str] = []
    for line in source.splitlines():
        text = line.strip()
        if not text or text.startswith("//"):
            continue
        match = _INCLUDE.fullmatch(text)
        if match is None:
            break
        if match.group(1) not in STANDARD:
            return None
        names.append(match.group(1))
    if not names or all(name in TRIVIAL for name in names):
        return None
    return "".join(f"#include <{name}>\n" for name in names)


class PrecompiledHeaders:
    """The precompiled headers of one build service, under `root` (made and owned by the service's uid)."""

    def __init__(self, root: Path, uid: int | None) -> None:
        self.root, self.uid = root, uid
        self.seen: dict[str, int] = {}
        self.failed: set[str] = set()

    def header_for(self, source: str, language: str, flags: list[str]) -> Path | None:
        """The header to `-include` for this build, or None (no block, first sighting, or it failed)."""
        block = leading_includes(source) if language == "c++" else None
        if block is None:
            return None
        key = _key(block, flags, compiler_identity(compiler_for(language)))
        header = self.root / key / HEADER_NAME
        if _trusted(header) and _trusted(header.with_name(HEADER_NAME + ".gch")):
            return header
        self.seen[key] = self.seen.get(key, 0) + 1
        if self.seen[key] < 2 or key in self.failed:
            return None
        if not self._build(key, block, language, flags):
            self.failed.add(key)
            return None
        return header

    def _build(self, key: str, block: str, language: str, flags: list[str]) -> bool:
        os.makedirs(self.root, mode=0o755, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=".pch-", dir=self.root))
        try:
            header = workdir / HEADER_NAME
            header.write_text(block)
            if self.uid is not None:
                os.chown(workdir, self.uid, self.uid)
            command, popen = limited([compiler_for(language), *[f for f in flags if f != "-shared"], "-x", "c++-header",
                                      str(header), "-o", str(header) + ".gch"],
                                     BuildLimits.for_build(language, PCH_TIMEOUT_S), self.uid)
            try:
                done = subprocess.run(command, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True,
                                      timeout=PCH_TIMEOUT_S, env={**os.environ, "TMPDIR": str(workdir)}, **popen)
            except subprocess.TimeoutExpired:
                return False
            compiled = Path(str(header) + ".gch")
            if done.returncode != 0 or not compiled.is_file() or compiled.is_symlink():
                return False
            for path in (header, compiled):
                os.chown(path, os.geteuid(), os.getegid())
                os.chmod(path, 0o644)
            os.chown(workdir, os.geteuid(), os.getegid())
            os.chmod(workdir, 0o755)
            try:
                os.rename(workdir, self.root / key)
            except OSError:  # another service built it first
                return _trusted(self.root / key / HEADER_NAME)
            return True
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _key(block: str, flags: list[str], identity: str) -> str:
    return hashlib.sha256("\0".join([block, *flags, identity]).encode()).hexdigest()[:32]


def _trusted(path: Path) -> bool:
    """A file this process's uid owns that no one else can change, in a directory likewise."""
    try:
        st, parent = os.lstat(path), os.lstat(path.parent)
    except OSError:
        return False
    mine = os.geteuid()
    return (st.st_uid == mine and parent.st_uid == mine and not (st.st_mode | parent.st_mode) & 0o022
            and os.path.isfile(path) and not os.path.islink(path))
