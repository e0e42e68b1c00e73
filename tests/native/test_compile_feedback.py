"""Compiler feedback quotes only the candidate's own source (real g++/nvcc builds, local and brokered)."""

from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path

import pytest

from kernelrl.evaluate.builds import BuildService
from kernelrl.evaluate.feedback import compile_error_text
from kernelrl.native.build import CompileError, build_shared_library, run_compiler

KERNEL_TAIL = "void f(float* x) { x[0] = 1.f; }\n"


def secret_file(directory: Path, name: str = "secret.txt") -> tuple[Path, list[str]]:
    """A file whose tokens would show up in any diagnostic that quotes or names them."""
    tokens = [f"SECRET_{secrets.token_hex(6)}" for _ in range(3)]
    path = directory / name
    path.write_text(f"{tokens[0]} {tokens[1]};\nint {tokens[2]} = ;\n")
    return path, tokens


def broker_log(source: str, language: str = "c++", flags: list[str] | None = None) -> str:
    reply = BuildService(None).handle({"source": source, "language": language, "flags": flags or []},
                                      time.monotonic() + 120)
    assert reply is not None and "path" not in reply, reply
    return f"{reply['message']}\n{reply['log']}"


def local_log(source: str, language: str = "c++") -> str:
    with pytest.raises(CompileError) as info:
        build_shared_library(source, language)
    return str(info.value)


def candidate_for(kernel: str) -> str:
    return f'from kernelrl.native import load_cpp\n\nlib = load_cpp(r"""\n{kernel}""", ["f"])\n'


@pytest.mark.parametrize("route", ["local", "broker"])
def test_a_file_included_through_a_macro_is_never_echoed(tmp_path: Path, route: str) -> None:
    path, tokens = secret_file(tmp_path)
    source = (f'// {secrets.token_hex(4)}\n#define LEAK "{path}"\n#include LEAK\n'
              "void f(float* x) {\n    x[0] = undefined_name;\n}\n")
    log = local_log(source) if route == "local" else broker_log(source)
    for token in tokens:
        assert token not in log, log
    assert f"diagnostics in other files omitted (e.g. {path}:1)" in log, log
    # The candidate's own error keeps its message and quoted line.
    assert "kernel.cpp:5:12: error: ‘undefined_name’ was not declared in this scope" in log, log
    assert "    5 |     x[0] = undefined_name;" in log, log
    text = compile_error_text(CompileError("g++ failed", log, source, "kernel.cpp"), candidate_for(source))
    assert "in other files omitted" in text and not any(token in text for token in tokens), text


def test_etc_passwd_is_not_echoed() -> None:
    source = f'// {secrets.token_hex(4)}\n#define P "/etc/passwd"\n#include P\n{KERNEL_TAIL}'
    log = broker_log(source)
    first = Path("/etc/passwd").read_text().splitlines()[0]
    assert first not in log and first.split(":")[0] + ":" not in log, log
    assert "omitted (e.g. /etc/passwd:1)" in log, log


@pytest.mark.skipif(shutil.which("ld.mold") is None, reason="mold is not installed (apt-get install mold)")
def test_a_linker_that_quotes_a_foreign_file_is_not_echoed(tmp_path: Path) -> None:
    """mold (opt-in: KERNELRL_LINKER=mold) quotes the offending line of a file it took for a linker script; its
    lines are not the toolchain's known ones, so the log keeps none of them."""
    secret = f"root:x:0:0:{secrets.token_hex(6)}:/root:/bin/bash"
    foreign = tmp_path / "not_a_script.txt"
    foreign.write_text(secret + "\n")
    source = f"void f(float* x) {{ x[0] = 1.0f; }}  // {secrets.token_hex(4)}\n"
    with pytest.raises(CompileError) as failed:
        run_compiler(source, "c++", ["-O1", "-fPIC", "-shared", "-fuse-ld=mold", str(foreign)], str(tmp_path),
                     timeout=120)
    assert secret.split(":")[4] not in failed.value.log and "linker script" not in failed.value.log, failed.value.log


@pytest.mark.parametrize("name", ["d(3): error: q", "x:1:1: error: y", "as: x", "ld"])
def test_crafted_file_names_do_not_pass_for_the_candidate_or_the_toolchain(tmp_path: Path, name: str) -> None:
    """Names that parse as another location or a tool line, in a directory that looks like a toolchain one."""
    headers = Path("/usr/include")
    (tmp_path / "d").symlink_to(headers)  # `.../d` resolves into the toolchain's headers
    crafted = tmp_path / name
    crafted.mkdir()
    path, tokens = secret_file(crafted, "s")
    source = f'// {secrets.token_hex(4)}\n#define LEAK "{path}"\n#include LEAK\n{KERNEL_TAIL}'
    log = broker_log(source)
    for token in tokens:
        assert token not in log, log
    assert "omitted" in log, log  # the file was read and diagnosed, and the diagnostics left out


def test_errors_in_toolchain_headers_keep_their_location_and_message() -> None:
    kernel = (
        f"// {secrets.token_hex(4)}\n#include <algorithm>\n#include <vector>\nstruct A {{ int v; }};\n"
        "void f(float* x) {\n    std::vector<A> v(3);\n    std::sort(v.begin(), v.end());\n    x[0] = 1.f;\n}\n"
    )
    log = broker_log(kernel)
    assert "kernel.cpp:7:14:   required from here" in log, log
    assert "error: no match for ‘operator<’ (operand types are ‘A’ and ‘A’)" in log, log
    assert "/usr/include/" in log
    assert "*__it1 < *__it2" not in log, "a toolchain header's source line was quoted"
    candidate = candidate_for(kernel)
    text = compile_error_text(CompileError("g++ failed", log, kernel, "kernel.cpp"), candidate)
    line = candidate.splitlines().index("    std::sort(v.begin(), v.end());") + 1
    assert f"candidate.py:{line}:14:   required from here" in text, text
    assert "no match for ‘operator<’" in text, text


@pytest.mark.skipif(shutil.which(os.environ.get("NVCC", "nvcc")) is None, reason="needs nvcc")
def test_nvcc_feedback_echoes_no_other_file(tmp_path: Path) -> None:
    path, tokens = secret_file(tmp_path)
    source = f'// {secrets.token_hex(4)}\n#define LEAK "{path}"\n#include LEAK\nvoid f(float* x) {{ x[0] = y; }}\n'
    log = broker_log(source, "cuda")
    for token in tokens:
        assert token not in log, log
    assert "kernel.cu(4): error: identifier \"y\" is undefined" in log, log
    assert f"omitted (e.g. {path}:1)" in log, log


REFUSED = [
    '#include "/etc/passwd"',
    "#include </etc/hostname>",
    '  #  include "../../../../etc/passwd"',
    '%:include "/proc/self/status"',
    '#inc\\\nlude "/etc/passwd"',
    '/* a */ # /* b */ include /* c */ "/etc/passwd"',
    '#include_next "/etc/passwd"',
    '#if __has_include("/etc/passwd")\n#endif',
]


@pytest.mark.parametrize("directive", REFUSED)
def test_includes_of_absolute_or_parent_paths_are_refused_before_compiling(directive: str) -> None:
    source = f"// {secrets.token_hex(4)}\n\n{directive}\n{KERNEL_TAIL}"
    with pytest.raises(CompileError) as info:
        build_shared_library(source)
    assert info.value.message == "include refused before compiling", str(info.value)
    assert info.value.log.startswith("kernel.cpp:3:1: error: "), info.value.log
    assert "is not allowed" in info.value.log
    assert broker_log(source).startswith("include refused before compiling\nkernel.cpp:3:1: error: ")


def test_only_real_directives_are_refused_not_lookalikes_in_comments_or_strings() -> None:
    source = (
        f"// {secrets.token_hex(4)}\n#include <vector>\n#include \"cstdint\"\n"
        '// #include "/etc/passwd"\n/*\n#include "/etc/passwd"\n*/\n'
        'static const char* text = R"x(\n#include "/etc/passwd"\n)x";\n'
        "#define HEADER <cmath>\n#include HEADER\n"
        "void f(float* x) { x[0] = text[0]; }\n"
    )
    assert build_shared_library(source).is_file()
    with pytest.raises(CompileError) as info:
        build_shared_library(source + '#include "/etc/hostname"\n')
    line = len(source.splitlines()) + 1
    assert info.value.log.startswith(f'kernel.cpp:{line}:1: error: #include "/etc/hostname" is not allowed'), info.value.log
