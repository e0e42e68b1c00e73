"""What one g++ build of a tiny-family kernel costs, by part, side by side in one run.

In the main job's RL run the build is the largest part of an evaluation (`main_job_tiny_cpu.json`: build
p50 ~98 ms of ~162 ms), so this splits it: the whole build with DEFAULT_FLAGS and the default linker (the
`#include <cmath>` block with and without its precompiled header), compile-only and link-only (g++'s own link,
and the lean link builds of C-style sources get: the C libraries alone, `native.build.LEAN_LINK_LIBS`), the
compiler's fixed cost (a one-line file without includes; the precompiled header alone, no kernel), and the link with
the gold, mold and lld linkers where they are installed. Then the build service's own steps around the compiler, each
timed alone (`service_*`: the keyed cache path, the scratch directory, the precompiled-header lookup, the
compiler run as the build uid, the kill of whatever that uid left, adopting the library, recording its
identity) and its whole `handle` for a new source; and the gym's build stage for a source never seen
before (the broker's compile, the candidate's load) and for a cached one, through the real pool. Each row
is the median wall time of `--repeats` runs; the ratios are to the bare build with the precompiled header. Last,
the whole build as builds run it (the lean link, the compiler's default linker) beside g++'s own link (`full_link`,
as builds linked before the lean link), with gold, mold and lld where installed, and with <cmath> whole (C++17's
special math functions declared, as builds had them before WITHOUT_SPECIAL_MATH), interleaved, in wall and CPU time
(every process the build started counted, mold's forked linker too).

    python bench/bench_build_cost.py [--repeats 15] [--no-write]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from kernelrl.native.build import (
    DEFAULT_FLAGS,
    WITHOUT_SPECIAL_MATH,
    compile_command,
    default_flags,
)

KERNEL = """#include <cmath>
#include <cstdint>

void fused_chain(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) { float v = x[i]; v = std::tanh(v); v = v * 2.0f; y[i] = v; }
}
"""


def median_ms(command: list[str], cwd: Path, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def become_subreaper() -> None:
    """Adopt orphaned descendants (PR_SET_CHILD_SUBREAPER), so `reap_orphans` can count their CPU: mold links in a
    child it forks and returns before that child exits, which would otherwise never be counted."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def reap_orphans() -> None:
    """Wait for every child left (adopted orphans included)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


LINKERS = ("gold", "mold", "lld")  # g++'s other -fuse-ld choices, timed where installed (apt-get install mold lld)


def precompile_block(work: Path, flags: list[str]) -> None:
    """`block.h` (the tiny family's include block) and its precompiled header in `work`, built with `flags`."""
    (work / "block.h").write_text("#include <cmath>\n#include <cstdint>\n")
    subprocess.run(["g++", *flags, "-x", "c++-header", "block.h", "-o", "block.h.gch"], cwd=work, check=True)


def linker_ab(repeats: int, only: Collection[str] | None = None) -> dict[str, float]:
    """The whole build with its precompiled header, as builds run it (the lean link, the compiler's default linker),
    with g++'s own link (`full_link`), with each of LINKERS installed, and with g++'s own link and <cmath> whole
    (`whole_cmath`: without WITHOUT_SPECIAL_MATH, its own precompiled header), interleaved in random order so all
    see the same load: median wall and CPU (user + system of every process the build started, `become_subreaper`)
    ms. On a busy 2-core machine the CPU time is what an RL run's builds compete for; a multi-threaded linker can only shorten the wall time where a core is idle.
    `only`: the arms to time (default: all)."""
    become_subreaper()
    flags = DEFAULT_FLAGS["c++"]
    whole = [flag for flag in flags if flag != WITHOUT_SPECIAL_MATH]
    arms = {"default_linker": (flags, "block.h", True), "full_link": (flags, "block.h", False),
            "whole_cmath": (whole, "whole/block.h", False),
            **{linker: ([*flags, f"-fuse-ld={linker}"], "block.h", True) for linker in LINKERS if shutil.which(f"ld.{linker}")}}
    if only is not None:
        arms = {arm: spec for arm, spec in arms.items() if arm in only}
    wall: dict[str, list[float]] = {arm: [] for arm in arms}
    cpu: dict[str, list[float]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        precompile_block(work, flags)
        if "whole_cmath" in arms:
            (work / "whole").mkdir()
            precompile_block(work / "whole", whole)
        order = random.Random(0)
        for i in range(2 * repeats):
            for arm in order.sample(list(arms), len(arms)):
                (work / "kernel.cpp").write_text(f"{KERNEL}// {i} {arm}\n")
                arm_flags, header, lean = arms[arm]
                command = compile_command("g++", arm_flags, header, "kernel.cpp", "k.so", lean)
                cpu_start, start = children_cpu_s(), time.perf_counter()
                subprocess.run(command, cwd=work, check=True, capture_output=True)
                wall[arm].append(time.perf_counter() - start)
                reap_orphans()  # mold's forked linker may still be exiting
                cpu[arm].append(children_cpu_s() - cpu_start)
    return {**{f"ab_wall_{arm}": 1000 * statistics.median(v) for arm, v in wall.items()},
            **{f"ab_cpu_{arm}": 1000 * statistics.median(v) for arm, v in cpu.items()}}


def compiler_parts(repeats: int) -> dict[str, float]:
    flags = DEFAULT_FLAGS["c++"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "kernel.cpp").write_text(KERNEL)
        precompile_block(work, flags)
        compile_flags = [f for f in flags if f != "-shared"]
        subprocess.run(["g++", *compile_flags, "-include", "block.h", "-c", "kernel.cpp", "-o", "kernel.o"], cwd=work, check=True)
        (work / "empty.cpp").write_text("")
        (work / "bare.cpp").write_text("void f() {}\n")
        parts = {
            "build_no_pch": median_ms(["g++", *flags, "kernel.cpp", "-o", "k.so"], work, repeats),
            "compile_bare": median_ms(["g++", *compile_flags, "-c", "bare.cpp", "-o", "b.o"], work, repeats),
            "compile_pch_alone": median_ms(["g++", *compile_flags, "-include", "block.h", "-c", "empty.cpp", "-o", "e.o"],
                                           work, repeats),
            "build_pch": median_ms(["g++", *flags, "-include", "block.h", "kernel.cpp", "-o", "k.so"], work, repeats),
            "compile_only_pch": median_ms(["g++", *compile_flags, "-include", "block.h", "-c", "kernel.cpp", "-o", "k.o"],
                                          work, repeats),
            "link_only_bfd": median_ms(["g++", "-shared", "-fopenmp", "kernel.o", "-o", "k.so"], work, repeats),
            "link_only_lean": median_ms(compile_command("g++", ["-shared", "-fopenmp"], None, "kernel.o", "k.so", lean=True),
                                        work, repeats),
            "process_start_true": median_ms(["true"], work, repeats),
        }
        for linker in LINKERS:  # the link alone; the whole build with each is `linker_ab`'s, interleaved
            if shutil.which(f"ld.{linker}"):
                parts[f"link_only_{linker}"] = median_ms(["g++", "-shared", "-fopenmp", f"-fuse-ld={linker}", "kernel.o",
                                                          "-o", "k.so"], work, repeats)
    return parts


@contextlib.contextmanager
def cold_cache(under: Path | None = None) -> Iterator[Path]:
    """An empty build cache of this process's own (KERNELRL_CACHE_DIR), removed afterwards: beside the shared one
    (what the pool's sandbox mounts), or `under` a directory the build uid can traverse."""
    root = (under or Path.home() / ".cache") / f"kernelrl-bench-build-{os.getpid()}"
    root.mkdir(mode=0o755, parents=True)
    saved = os.environ.get("KERNELRL_CACHE_DIR")
    os.environ["KERNELRL_CACHE_DIR"] = str(root)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if saved is None:
            os.environ.pop("KERNELRL_CACHE_DIR", None)
        else:
            os.environ["KERNELRL_CACHE_DIR"] = saved


def service_parts(repeats: int) -> dict[str, float]:
    """The build service's steps for a new source (ms, p50), each timed alone in this process, beside its whole
    `handle`: `service_handle_new - service_compiler` is what the service adds to the compiler."""
    from kernelrl.evaluate import builds
    from kernelrl.evaluate.build_identity import record_identity
    from kernelrl.evaluate.sandbox import BUILD_UID_BASE
    from kernelrl.native.build import library_path, run_compiler

    uid = BUILD_UID_BASE if os.geteuid() == 0 else None  # as a bubblewrap pool's slot 0 runs its compilers
    flags = default_flags("c++")  # the service's own: DEFAULT_FLAGS and its linker (mold where installed)
    times: dict[str, list[float]] = {}

    def timed(name: str, step: Any) -> Any:
        start = time.perf_counter()
        value = step()
        times.setdefault(name, []).append(1000 * (time.perf_counter() - start))
        return value

    with cold_cache(Path(tempfile.gettempdir())):  # this process runs the service: no sandbox mounts the cache
        service = builds.BuildService(uid)
        request = {"language": "c++", "flags": []}
        for i in range(2):  # the second sighting of the include block builds its precompiled header
            service.handle({**request, "source": KERNEL.replace("2.0f", f"{2.0 + (i + 1) * 1e-4}f")}, time.monotonic() + 60)
        for i in range(repeats):
            reply = timed("service_handle_new", lambda i=i: service.handle(
                {**request, "source": KERNEL.replace("2.0f", f"{3.0 + i * 1e-4}f")}, time.monotonic() + 60))
            if not reply or "path" not in reply:
                raise SystemExit(f"the build service did not build the kernel: {reply}")
        assert service.headers is not None
        for i in range(repeats):
            source = KERNEL.replace("2.0f", f"{4.0 + i * 1e-4}f")
            target = timed("service_cache_path", lambda source=source: library_path(source, "c++", flags))
            native = target.parent.parent
            os.makedirs(target.parent, mode=0o711, exist_ok=True)
            workdir = timed("service_scratch_dir", lambda native=native: tempfile.mkdtemp(prefix=".build-", dir=native))
            if uid is not None:
                os.chown(workdir, uid, uid)
            header = timed("service_pch_lookup", lambda source=source: service.headers.header_for(source, "c++", flags))
            out, _ = timed("service_compiler", lambda source=source, workdir=workdir, header=header: run_compiler(
                source, "c++", flags, workdir, 60, uid, precompiled=header))
            if uid is not None:
                timed("service_kill_build_uid", lambda: builds.kill_all_of(uid))
            timed("service_adopt", lambda out=out, target=target: (builds._adopt(out), os.replace(out, target)))
            timed("service_scratch_dir", lambda workdir=workdir: shutil.rmtree(workdir, ignore_errors=True))
            timed("service_record_identity", lambda target=target, native=native: record_identity(target, native))
    # the scratch directory's two rows (make, remove) are one step
    scratch = times.pop("service_scratch_dir")
    times["service_scratch_dir"] = [a + b for a, b in zip(scratch[::2], scratch[1::2], strict=True)]
    return {name: statistics.median(values) for name, values in times.items()}


def gym_build_stage(repeats: int) -> dict[str, float]:
    """The pool's build stage (ms, p50) for new sources (each with its own constant) and for a cached one."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_eval_overhead import CANDIDATE, sized

    from kernelrl.evaluate import Candidate, EvalConfig, EvalPool

    source = CANDIDATE.replace("void relu2", "#include <cmath>\n#include <cstdint>\nvoid relu2")
    task, config = sized(65536), EvalConfig(measure_timing=False)
    # "new" must be new: an earlier run of this script built the same sources in the shared cache
    with cold_cache(), EvalPool(workers=1, config=config) as pool:
        for i in range(2):  # the second sighting of the include block builds its precompiled header
            pool.evaluate(task, Candidate(source.replace("2.0f", f"{2.0 + (i + 1) * 1e-4}f")))
        new = [pool.evaluate(task, Candidate(source.replace("2.0f", f"{2.0 + (i + 10) * 1e-4}f"))).stage_seconds("build")
               for i in range(repeats)]
        cached = [pool.evaluate(task, Candidate(source)).stage_seconds("build") for _ in range(repeats + 1)][1:]
    return {"gym_build_new_source": 1000 * statistics.median(new), "gym_build_cached": 1000 * statistics.median(cached)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_build_cost.json")
    args = parser.parse_args()
    parts = compiler_parts(args.repeats) | service_parts(args.repeats) | gym_build_stage(args.repeats)
    base = parts["build_pch"]
    for name, ms in parts.items():
        print(f"{name:24s} {ms:7.1f} ms  {ms / base:5.2f}x of build_pch")
    linkers = linker_ab(args.repeats)
    print(f"interleaved, {2 * args.repeats} builds each (wall / CPU ms): " + ", ".join(
        f"{arm.replace('_', ' ')} {linkers[f'ab_wall_{arm}']:.1f} / {linkers[f'ab_cpu_{arm}']:.1f}"
        for arm in [k[len("ab_wall_"):] for k in linkers if k.startswith("ab_wall_")]))
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_build_cost", {"median_ms": parts, "repeats": args.repeats,
                                                            "ratio_to_build_pch": {k: v / base for k, v in parts.items()},
                                                            "linker_ab_ms": linkers}))


if __name__ == "__main__":
    main()
