"""The kernel helper: real g++ builds, the content-hash cache, argument checks, prototype parsing."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from kernelrl.native import CompileError, SignatureError, call_counts, load_cpp, reset_call_counts
from kernelrl.native.signature import parse_function

AXPY = r"""
#include <cstdint>
// scale and add: y = a * x + y
template <typename T> static inline T fma_(T a, T x, T y) { return a * x + y; }
void axpy(float a, const float* __restrict__ x, float* y, int64_t n) {
    #pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) y[i] = fma_(a, x[i], y[i]);
}
int64_t count_positive(const double* x, long n) {
    int64_t c = 0;
    for (long i = 0; i < n; ++i) c += x[i] > 0;
    return c;
}
"""


def test_build_and_call_on_tensors() -> None:
    lib = load_cpp(AXPY, functions=["axpy", "count_positive"])
    x, y = torch.randn(1000), torch.randn(1000)
    expected = 2.5 * x + y
    lib.axpy(2.5, x, y, x.numel())
    torch.testing.assert_close(y, expected)
    values = torch.tensor([1.0, -1.0, 3.0, 0.0], dtype=torch.float64)
    assert lib.count_positive(values, 4) == 2


def test_calls_are_counted() -> None:
    lib = load_cpp(AXPY, functions=["axpy"])
    reset_call_counts()
    x = torch.ones(8)
    lib.axpy(1.0, x, x.clone(), 8)
    lib.axpy(1.0, x, x.clone(), 8)
    assert call_counts() == {"axpy": 2}


def test_argument_errors_name_the_problem() -> None:
    lib = load_cpp(AXPY, functions=["axpy"])
    x = torch.randn(4, 4)
    with pytest.raises(TypeError, match=r"dtype torch.float64, float\* needs torch.float32"):
        lib.axpy(1.0, x.double(), x, 16)
    with pytest.raises(ValueError, match="not contiguous"):
        lib.axpy(1.0, x.t(), x, 16)
    with pytest.raises(TypeError, match="needs a tensor"):
        lib.axpy(1.0, [1.0], x, 16)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        lib.axpy(1.0, x, x)


def test_compile_error_carries_the_compiler_log() -> None:
    with pytest.raises(CompileError) as info:
        load_cpp("void broken(float* x) {\n  x[0] = undefined_name;\n}\n", functions=["broken"])
    assert "undefined_name" in info.value.log
    assert "kernel.cpp:2" in info.value.log


def test_missing_function_and_unsupported_types() -> None:
    with pytest.raises(SignatureError, match="'nope' is not defined"):
        load_cpp(AXPY, functions=["nope"])
    with pytest.raises(SignatureError, match="not supported"):
        parse_function("void f(float** x) {}", "f")
    with pytest.raises(SignatureError, match="__global__"):
        parse_function("__global__ void k(float* x) { }", "k")


def test_parse_ignores_calls_and_comments() -> None:
    source = "/* void f(int x) { } */\nstatic void g() { f(3); }\nextern \"C\" void f(const float* a, int64_t n) { }\n"
    spec = parse_function(source, "f")
    assert [(a.name, a.base_type, a.pointer, a.mutable) for a in spec.args] == [
        ("a", "float", True, False),
        ("n", "int64_t", False, False),
    ]


def test_identical_kernel_never_rebuilds(tmp_path) -> None:
    """A second process loading the same source finds the cached library: no compiler run, < 10 ms."""
    source = "void twice(float* x, long n) { for (long i = 0; i < n; ++i) x[i] *= 2; }\n"
    script = (
        "import time, torch\n"
        "from kernelrl.native import load_cpp\n"
        "t = time.perf_counter()\n"
        f"lib = load_cpp({source!r}, ['twice'])\n"
        "print(time.perf_counter() - t, lib.path)\n"
    )
    first = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    start = time.time()
    second = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert first[1] == second[1]
    from pathlib import Path

    assert Path(second[1]).stat().st_mtime < start, "the cached library was rebuilt"
    assert float(second[0]) < float(first[0])


def test_unsafe_flags_are_found_in_forwarded_values_too() -> None:
    from kernelrl.native.build import unsafe_flag

    for flag in ("-fplugin=x.so", "-B/tmp", "-specs=s", "--sysroot=/x", "@flags", "-o", "-ccbin=/bin/sh",
                 "-Wl,-plugin,x.so", "-Xcompiler=-fplugin=x", "--compiler-options=-B/x", "-run"):
        assert unsafe_flag(flag) is not None, flag
    for flag in ("-O2", "-ffast-math", "-march=native", "-DN=4", "-I/usr/include", "-Wall", "-Xcompiler", "-fopenmp"):
        assert unsafe_flag(flag) is None, flag
