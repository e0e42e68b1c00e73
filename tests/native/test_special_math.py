"""C++17's special math functions: builds skip their header (most of a small kernel's compile time), and a
source that calls them, however it spells the name, is rebuilt with it and computes what C++17 says. Real g++
runs, through `run_compiler` and through the build service with its precompiled headers."""

from __future__ import annotations

import ctypes
import os
import secrets
import time
from pathlib import Path

import pytest

from kernelrl.evaluate.builds import BuildService
from kernelrl.native.build import WITHOUT_SPECIAL_MATH, CompileError, full_flags, run_compiler

pytestmark = pytest.mark.skipif(os.environ.get("KERNELRL_NO_NATIVE") == "1", reason="no compiler")

# Exports whether <cmath> declared the special functions (libstdc++ defines the feature macro with them).
PROBE = """
#include <cmath>
#include <cstdint>
extern "C" int special_declared() {
#ifdef __cpp_lib_math_special_functions
    return 1;
#else
    return 0;
#endif
}
"""
# Every way a name reaches the compiler: qualified, a using-declaration, a using-directive, token pasting, a suffix.
CALLS = PROBE + """
using std::legendre;
#define PASTE(a, b) a##b
namespace user { using namespace std; inline double h(double x) { return hermite(2, x); } }
extern "C" double special_sum(double x) {
    return std::cyl_bessel_j(0.5, x) + std::PASTE(riemann_, zeta)(x) + std::betaf(1.f, 2.f) + legendre(2, 0.5)
        + user::h(x) + BIAS;
}
"""


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.special_sum.restype, lib.special_sum.argtypes = ctypes.c_double, [ctypes.c_double]
    return lib


def _whole(tmp_path: Path, source: str) -> ctypes.CDLL:
    """The same source built as plain C++17, <cmath> whole."""
    flags = [flag for flag in full_flags("c++") if flag != WITHOUT_SPECIAL_MATH]
    work = tmp_path / "whole"
    work.mkdir()
    return _load(run_compiler(source, "c++", flags, str(work), timeout=120)[0])


def test_a_kernel_that_calls_no_special_function_builds_without_their_header(tmp_path: Path) -> None:
    path, _ = run_compiler(PROBE, "c++", full_flags("c++"), str(tmp_path), timeout=120)
    assert ctypes.CDLL(str(path)).special_declared() == 0


def test_a_kernel_that_calls_them_is_rebuilt_with_them_and_computes_what_cxx17_says(tmp_path: Path) -> None:
    source = CALLS.replace("BIAS", "0.0")
    work = tmp_path / "default"
    work.mkdir()
    lib = _load(run_compiler(source, "c++", full_flags("c++"), str(work), timeout=120)[0])
    assert lib.special_declared() == 1
    assert lib.special_sum(2.0) == _whole(tmp_path, source).special_sum(2.0)


def test_a_build_that_fails_for_another_reason_fails_with_its_own_error(tmp_path: Path) -> None:
    """A name like `beta` in a broken kernel (a LayerNorm's) is not a call of std::beta: the error is the kernel's."""
    source = "#include <cmath>\nfloat beta = 1.f;\nextern \"C\" float f() { return undeclared_thing(beta); }\n"
    with pytest.raises(CompileError) as failure:
        run_compiler(source, "c++", full_flags("c++"), str(tmp_path), timeout=120)
    assert "undeclared_thing" in failure.value.log and "beta" not in failure.value.log.split("error:")[1].split("\n")[0]


def test_the_build_service_rebuilds_a_caller_past_a_precompiled_header_made_without_them(tmp_path: Path) -> None:
    """The opening block's header is precompiled with the default flags (no special functions); a later
    source with the same block that calls them still builds, and right."""
    service = BuildService(None)
    run = secrets.randbelow(10**6)  # sources unique to this run: no earlier build is cached
    plain = [PROBE + f"extern \"C\" int tag() {{ return {run * 10 + i}; }}\n" for i in range(3)]
    paths = [_reply(service, source) for source in plain]  # the second sighting makes the block's header
    assert service.headers is not None and any(service.headers.root.iterdir())
    assert all(ctypes.CDLL(str(p)).special_declared() == 0 for p in paths)
    source = CALLS.replace("BIAS", f"{run}.0")
    lib = _load(_reply(service, source))
    assert lib.special_declared() == 1
    assert lib.special_sum(1.5) == _whole(tmp_path, source).special_sum(1.5)


def _reply(service: BuildService, source: str) -> Path:
    reply = service.handle({"source": source, "language": "c++", "flags": []}, time.monotonic() + 120)
    assert reply is not None and "path" in reply, reply
    return Path(reply["path"])
