"""The build's linker (`native.build.linker_flags`): the compiler's default unless KERNELRL_LINKER names one, and
a mold-linked library loads and computes like one ld.bfd links."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelrl.native.build import linker_flags, run_compiler

SOURCE = 'extern "C" float twice(float x) { return 2.0f * x; }\n'


def _linker_of(env: dict[str, str]) -> str:
    code = "from kernelrl.native.build import linker_flags; print(' '.join(linker_flags('c++')))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env},
                          check=True).stdout.strip()


def test_the_default_linker_unless_the_variable_names_one() -> None:
    assert linker_flags("cuda") == ()
    assert _linker_of({"KERNELRL_LINKER": ""}) == ""
    assert _linker_of({"KERNELRL_LINKER": "bfd"}) == "-fuse-ld=bfd"
    if shutil.which("ld.mold"):
        assert _linker_of({"KERNELRL_LINKER": "mold"}) == "-fuse-ld=mold"


def test_unknown_linker_is_named() -> None:
    code = "from kernelrl.native.build import linker_flags; linker_flags('c++')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "KERNELRL_LINKER": "ld.evil"})
    assert done.returncode != 0 and "KERNELRL_LINKER must be one of mold, gold, bfd, got 'ld.evil'" in done.stderr


@pytest.mark.skipif(shutil.which("ld.mold") is None, reason="mold is not installed (apt-get install mold)")
def test_a_mold_linked_library_loads_and_runs(tmp_path: Path) -> None:
    for linker in ("mold", "bfd"):
        work = tmp_path / linker
        work.mkdir()
        path, _ = run_compiler(SOURCE, "c++", ["-O2", "-fPIC", "-shared", f"-fuse-ld={linker}"], str(work), timeout=120)
        twice = ctypes.CDLL(str(path)).twice
        twice.argtypes, twice.restype = [ctypes.c_float], ctypes.c_float
        assert twice(1.5) == 3.0
    assert b"mold" in (tmp_path / "mold" / "lib.so").read_bytes()  # mold leaves its name in .comment
