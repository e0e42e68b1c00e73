"""Precompiled headers: a source's opening block of standard includes is compiled once and reused, and the
library built with it computes what the one built without it does. Real g++ runs through the build service."""

from __future__ import annotations

import ctypes
import math
import os
import secrets
import time
from pathlib import Path

import pytest

from kernelrl.evaluate.builds import BuildService
from kernelrl.native.build import default_flags
from kernelrl.native.pch import leading_includes

KERNEL = """
// a kernel
#include <cmath>
#include <cstdint>
#include <cstring>

extern "C" float softplus_sum(const float* x, int64_t n) {{
    float total = 0.f;
    for (int64_t i = 0; i < n; ++i) total += std::log1p(std::exp(x[i]));
    return total + {bias}.0f;
}}
"""


def test_only_an_opening_block_of_standard_headers_is_precompiled() -> None:
    assert leading_includes(KERNEL) == "#include <cmath>\n#include <cstdint>\n#include <cstring>\n"
    assert leading_includes("#include <cstdint>\nint f();") is None  # nothing worth precompiling
    assert leading_includes("#include <cmath>\n#include <mine.h>\n") is None  # not a standard header
    assert leading_includes('#include <cmath>\n#include "mine.h"\n') == "#include <cmath>\n"  # the block ends there
    assert leading_includes("#define N 4\n#include <cmath>\n") is None  # a macro first could change the headers
    assert leading_includes("#include <cmath>\n#define N 4\n#include <vector>\n") == "#include <cmath>\n"


def _build(service: BuildService, source: str) -> tuple[Path, float]:
    started = time.perf_counter()
    reply = service.handle({"source": source, "language": "c++", "flags": []}, time.monotonic() + 120)
    assert reply is not None and "path" in reply, reply
    return Path(reply["path"]), time.perf_counter() - started


def _call(path: Path) -> float:
    lib = ctypes.CDLL(str(path))
    lib.softplus_sum.restype = ctypes.c_float
    values = (ctypes.c_float * 4)(0.5, -1.0, 2.0, 0.0)
    return lib.softplus_sum(values, ctypes.c_int64(4))


@pytest.mark.skipif(os.environ.get("KERNELRL_NO_NATIVE") == "1", reason="no compiler")
def test_the_second_build_of_a_block_makes_its_header_and_later_builds_use_it() -> None:
    service = BuildService(None)
    run = secrets.randbelow(10**6) * 10  # sources unique to this run: no earlier build is cached
    plain, _ = _build(service, KERNEL.format(bias=run + 1))
    assert service.headers is not None
    pch_root = service.headers.root
    before = set(pch_root.iterdir()) if pch_root.is_dir() else set()
    second, _ = _build(service, KERNEL.format(bias=run + 2))  # second sighting: the header is built
    made = [d for d in set(pch_root.iterdir()) - before if not d.name.startswith(".")]
    assert made and (made[0] / "block.h.gch").is_file()
    assert (made[0] / "block.h").read_text() == leading_includes(KERNEL)
    third_source = KERNEL.format(bias=run + 3)
    assert service.headers.header_for(third_source, "c++", default_flags("c++")) == made[0] / "block.h"
    assert service.headers.header_for(KERNEL.replace("<cstring>", "<vector>"), "c++", default_flags("c++")) is None  # other block: first sighting
    third, _ = _build(service, third_source)
    expected = sum(math.log1p(math.exp(x)) for x in (0.5, -1.0, 2.0, 0.0))
    for path, bias in ((plain, 1), (second, 2), (third, 3)):
        assert _call(path) == pytest.approx(expected + run + bias, rel=1e-6)
