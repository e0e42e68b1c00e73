"""The lean link: a source with C headers only is linked against the C libraries alone (`-z defs`), and one that
needs libstdc++ after all is linked again as g++ links. Real g++ runs, through `run_compiler` and the build service."""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
import time
from pathlib import Path

import pytest

from kernelrl.evaluate.builds import BuildService
from kernelrl.native import build
from kernelrl.native.build import (
    LINK_FAILED,
    BuildLimits,
    CompileError,
    _compile,
    compiler_for,
    full_flags,
    lean_link,
    run_compiler,
)

pytestmark = pytest.mark.skipif(os.environ.get("KERNELRL_NO_NATIVE") == "1", reason="no compiler")

C_STYLE = """#include <cmath>
#include <cstdint>
extern "C" void act(const float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]) + expf(x[i]);
}
"""
# C headers only, yet operator new[] and delete[] live in libstdc++.
NEEDS_LIBSTDCXX = """#include <cstdint>
extern "C" float sum_copy(const float* x, int64_t n) {
    float* copy = new float[n];
    float total = 0.0f;
    for (int64_t i = 0; i < n; ++i) { copy[i] = x[i]; total += copy[i]; }
    delete[] copy;
    return total;
}
"""


def _needed(path: Path) -> str:
    return subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout


def test_which_builds_are_linked_lean() -> None:
    flags = full_flags("c++")
    assert lean_link(C_STYLE, flags)
    assert lean_link("#include <immintrin.h>\n#include <omp.h>\nvoid f() {}\n", flags)
    assert not lean_link("#include <vector>\nvoid f() {}\n", flags)
    assert not lean_link('#include "local.h"\nvoid f() {}\n', flags)
    assert not lean_link(C_STYLE, [*flags, "-fsanitize=address"])  # its runtime library comes with g++'s own link


def test_a_c_style_kernel_links_lean_and_computes(tmp_path: Path) -> None:
    flags = full_flags("c++")
    code, log = _compile(compiler_for("c++"), "c++", flags, None, _source(tmp_path, C_STYLE), str(tmp_path), 120, None,
                         BuildLimits.for_build("c++", 120), lean=True)
    assert code == 0, log
    lib = ctypes.CDLL(str(tmp_path / "lib.so"))
    x, y = (ctypes.c_float * 4)(-1.0, 0.0, 0.5, 2.0), (ctypes.c_float * 4)()
    lib.act(x, y, ctypes.c_int64(4))
    assert list(y) == pytest.approx([math.tanh(v) + math.exp(v) for v in x], rel=1e-5)


def test_a_source_that_needs_libstdcxx_fails_the_lean_link_and_builds_with_the_full_one(tmp_path: Path) -> None:
    flags = full_flags("c++")
    assert lean_link(NEEDS_LIBSTDCXX, flags)
    lean_dir = tmp_path / "lean"
    lean_dir.mkdir()
    code, log = _compile(compiler_for("c++"), "c++", flags, None, _source(lean_dir, NEEDS_LIBSTDCXX), str(lean_dir), 120,
                         None, BuildLimits.for_build("c++", 120), lean=True)
    assert code != 0 and LINK_FAILED.search(log), log  # -z defs: libstdc++ is really left out
    path, _ = run_compiler(NEEDS_LIBSTDCXX, "c++", flags, str(tmp_path), timeout=120)
    lib = ctypes.CDLL(str(path))
    lib.sum_copy.restype = ctypes.c_float
    assert lib.sum_copy((ctypes.c_float * 3)(1.0, 2.0, 3.5), ctypes.c_int64(3)) == pytest.approx(6.5)
    assert "libstdc++" in _needed(path)


def test_an_undefined_function_still_builds_as_g_plus_plus_links_it(tmp_path: Path) -> None:
    """`-z defs` is the lean link's alone: a library that leaves a symbol to its loader builds as before."""
    source = '#include <cstdint>\nextern "C" int64_t provided_elsewhere(int64_t);\nextern "C" int64_t f(int64_t n) ' \
             '{ return provided_elsewhere(n); }\n'
    path, _ = run_compiler(source, "c++", full_flags("c++"), str(tmp_path), timeout=120)
    assert path.is_file()


def test_a_library_the_toolchain_lacks_fails_the_lean_link_and_builds_with_the_full_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any link failure of the lean link falls back to g++'s own link, not only an undefined symbol: a toolchain
    without one of its libraries (clang without libgomp, say) reports "cannot find -l..." instead."""
    monkeypatch.setattr(build, "LEAN_LINK_LIBS", (*build.LEAN_LINK_LIBS, "-lkernelrl_absent_library"))
    path, _ = run_compiler(C_STYLE, "c++", full_flags("c++"), str(tmp_path), timeout=120)
    lib = ctypes.CDLL(str(path))
    x, y = (ctypes.c_float * 2)(0.5, -1.0), (ctypes.c_float * 2)()
    lib.act(x, y, ctypes.c_int64(2))
    assert list(y) == pytest.approx([math.tanh(v) + math.exp(v) for v in x], rel=1e-5)


def test_a_compile_error_is_not_built_twice(tmp_path: Path) -> None:
    """A source the compiler rejects never reaches the linker: its log has no link failure to retry on."""
    with pytest.raises(CompileError) as failed:
        run_compiler('#include <cstdint>\nextern "C" int64_t f(int64_t n) { return n +; }\n', "c++", full_flags("c++"),
                     str(tmp_path), timeout=120)
    assert not LINK_FAILED.search(failed.value.log), failed.value.log
    assert failed.value.log.count("expected primary-expression") == 1, failed.value.log


def test_the_build_service_serves_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELRL_CACHE_DIR", str(tmp_path / "cache"))
    service = BuildService(None)
    for source in (C_STYLE, NEEDS_LIBSTDCXX):
        reply = service.handle({"source": source, "language": "c++", "flags": []}, time.monotonic() + 120)
        assert reply is not None and "path" in reply, reply
        ctypes.CDLL(reply["path"])


def _source(work: Path, text: str) -> Path:
    path = work / "kernel.cpp"
    path.write_text(text)
    return path
