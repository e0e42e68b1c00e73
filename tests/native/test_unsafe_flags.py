"""Flags that write or dump files, leak through option files, run a shell or stop before linking are refused,
on every forwarding route (`-Wl,`, `-Xlinker`, `-Wp,`, `-Xcompiler`, nvcc's `--compiler-options`/`--linker-options`)."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from kernelrl.evaluate.builds import BuildService
from kernelrl.native.build import DEFAULT_FLAGS, CompileError, build_shared_library, run_compiler, unsafe_flag

KERNEL = "void f(float* x) { x[0] = 1.f; }\n"
needs_nvcc = pytest.mark.skipif(shutil.which(os.environ.get("NVCC", "nvcc")) is None, reason="needs nvcc")

# Each entry is one request's flags; at least one of them must be refused.
WRITES_OR_DUMPS = [
    # gcc, directly
    ["-MD"], ["-MMD"], ["-MD", "-MF/tmp/x.d"], ["-MD", "-MT", "target"], ["-MD", "-MQ", "target"], ["-save-temps"],
    ["-save-temps=obj"], ["-dumpdir", "/tmp/"], ["-dumpbase", "x"], ["-aux-info", "/tmp/x"], ["-fdump-tree-all"],
    ["-fdump-rtl-expand=/tmp/x"], ["-fprofile-generate=/tmp/p"], ["-fprofile-use=/tmp/p"], ["-fprofile-dir=/tmp"],
    ["-fstack-usage"], ["-fcallgraph-info"], ["-ftest-coverage"], ["--coverage"], ["-fsave-optimization-record"],
    ["-fopt-info-vec=/tmp/x"], ["-fdiagnostics-format=json"], ["-da"], ["-fmodule-mapper=|sh"], ["--ld-path=/bin/sh"],
    # what stops before a shared library (its "library" would be preprocessed text, assembly, an object)
    ["-E"], ["-S"], ["-c"], ["-fsyntax-only"],
    # option and source files the kernel does not name
    ["-include", "x.h"], ["-imacros", "x.h"],
    # the linker through -Wl, and -Xlinker
    ["-Wl,-Map=/tmp/m"], ["-Wl,-Map,/tmp/m"], ["-Wl,--Map=/tmp/m"], ["-Wl,--dependency-file=/tmp/d"],
    ["-Wl,--print-map"], ["-Wl,-M"], ["-Xlinker", "-Map=/tmp/m"], ["-Xlinker", "--dependency-file=/tmp/d"],
    ["-Xlinker", "-Map", "-Xlinker", "/tmp/m"],
    # the preprocessor and the assembler
    ["-Wp,-MD,/tmp/d"], ["-Xpreprocessor", "-MF"], ["-Wa,-adhln=/tmp/listing"], ["-Xassembler", "-a=/tmp/listing"],
    # nvcc, and its forwarding to the host compiler and linker
    ["-Xcompiler=-MF"], ["-Xcompiler=-fdump-tree-all"], ["-Xcompiler", "-save-temps"], ["-Xcompiler", "-Wl,-Map=/tmp/m"],
    ["--compiler-options=-Wl,-Map=/tmp/m"], ["--compiler-options=-fprofile-generate"], ["--compiler-options", "-MD"],
    ["--linker-options=-Map=/tmp/m"], ["--linker-options", "--dependency-file=/tmp/d"], ["-keep"], ["--keep"],
    ["--save-temps"], ["--generate-dependencies-with-compile"], ["--dependency-output=/tmp/d"],
    ["--time=/tmp/t"], ["-time", "/tmp/t"], ["--fdevice-time-trace=/tmp/t"], ["--options-file=/tmp/o"],
    ["-Xcudafe", "--gen_c_file_name=/tmp/x"], ["-Xnvlink", "--verbose"], ["-Xfatbin", "--create=/tmp/x"], ["--ptx"],
    ["-dc"], ["-dlink"], ["-lib"], ["--pre-include=/etc/passwd"],
    # include and library search paths into device and kernel files, the root, or through ..
    ["-I/dev"], ["-I/proc/self"], ["-isystem/sys"], ["-I/"], ["-I//"], ["-I.."], ["-I../x"], ["-L/proc"],
    ["-I", "/proc"], ["/dev/zero"], ["-Xcompiler=-I/proc"],
]
ALLOWED = [
    "-O2", "-ffast-math", "-march=native", "-DN=4", "-I/usr/include", "-Wall", "-Wextra", "-Xcompiler", "-fopenmp",
    "-frecord-gcc-switches", "-funroll-loops", "-Xptxas=-v", "-lineinfo", "--use_fast_math", "-arch=sm_80",
    "-gencode=arch=compute_80,code=sm_80", "-std=c++20", "-Wl,-O1", "-Wl,--as-needed", "-lm", "-fno-exceptions",
    "-Wp,-DX=1", "-ansi", "-ftree-vectorize", "-mavx2", "-g",
]
SHELL = ["-DX=$(touch /tmp/x)", "-Xcompiler=-fPIC;touch /tmp/x", "-DX=`id`", "-DX=1 -DY=2", "-I/tmp/a b", '-DX="1"',
         "-DX=1|sh", "-Xcompiler=-DX=$(id)", "-DX=\\$HOME"]


@pytest.mark.parametrize("flags", WRITES_OR_DUMPS, ids=lambda f: " ".join(f))
def test_flags_that_write_dump_or_stop_early_are_refused(flags: list[str]) -> None:
    """The same pieces are refused whichever compiler gets them (nvcc forwards to gcc and ld)."""
    assert any(unsafe_flag(flag) for flag in flags), flags
    assert any(unsafe_flag(flag, "cuda") for flag in flags), flags


def test_nvcc_flags_must_be_shell_safe_and_ordinary_flags_pass() -> None:
    for flag in SHELL:
        assert unsafe_flag(flag, "cuda") is not None, flag
    for language in ("c++", "cuda"):
        for flag in ALLOWED:
            assert unsafe_flag(flag, language) is None, (flag, language)
    assert unsafe_flag("-DN=(1<<10)", "c++") is None  # g++ is run without a shell


@pytest.mark.parametrize("route", ["local", "broker"])
def test_a_refused_flag_writes_nothing(route: str) -> None:
    out = Path(tempfile.mkdtemp(prefix="kernelrl-flags-"))
    requests = [[f"-Wl,-Map={out}/map.txt"], ["-MD", f"-MF{out}/deps.d"], ["-Xlinker", f"--dependency-file={out}/d"],
                [f"-dumpdir{out}/", "-save-temps"], [f"-fdump-tree-original={out}/tree"], ["-Wp,-MD," + f"{out}/p.d"]]
    try:
        for flags in requests:
            source = f"// {secrets.token_hex(4)}\n{KERNEL}"
            if route == "local":
                with pytest.raises(CompileError, match="is not allowed"):
                    build_shared_library(source, "c++", tuple(flags))
            else:
                reply = BuildService(None).handle({"source": source, "language": "c++", "flags": flags},
                                                  time.monotonic() + 60)
                assert reply is not None and "is not allowed" in reply.get("message", ""), (flags, reply)
            assert list(out.iterdir()) == [], flags
    finally:
        shutil.rmtree(out)


@pytest.mark.parametrize("flags", [["-E"], ["--version"]], ids=["preprocess-only", "version"])
def test_a_build_that_makes_no_library_is_an_error_not_a_cached_file(flags: list[str]) -> None:
    source = f"// {secrets.token_hex(4)}\n{KERNEL}"
    reply = BuildService(None).handle({"source": source, "language": "c++", "flags": flags}, time.monotonic() + 60)
    assert reply is not None and "path" not in reply, reply
    assert "is not allowed" in reply["message"] or "made no library" in reply["message"], reply


@needs_nvcc
@pytest.mark.parametrize("route", ["run_compiler", "broker"])
def test_nvcc_runs_no_shell_command_from_a_flag(tmp_path: Path, route: str) -> None:
    marker = Path(tempfile.mkdtemp(prefix="kernelrl-shell-")) / "ran"
    flag = f"-DX=$(touch${{IFS}}{marker})"
    source = f"// {secrets.token_hex(4)}\n__global__ void k(float* x) {{ x[0] = 1.f; }}\n{KERNEL}"
    try:
        if route == "run_compiler":
            with pytest.raises(CompileError, match="is not allowed"):
                run_compiler(source, "cuda", [*DEFAULT_FLAGS["cuda"], flag], str(tmp_path), timeout=300)
        else:
            reply = BuildService(None).handle({"source": source, "language": "cuda", "flags": [flag]},
                                              time.monotonic() + 300)
            assert reply is not None and "is not allowed" in reply.get("message", ""), reply
        assert not marker.exists(), "nvcc ran a shell command taken from a flag"
    finally:
        shutil.rmtree(marker.parent)
