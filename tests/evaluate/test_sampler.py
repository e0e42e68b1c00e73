"""The ptrace PC sampler on real child processes: own C code, torch, both, threads, exits and signals."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelrl.evaluate.build_identity import file_identities
from kernelrl.evaluate.sampler import PcSampler, PcSamples, classify, object_class, sampling_available

HZ = 2000.0
C_SOURCE = r"""
#include <pthread.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
double busy(double seconds) {  /* a float loop, all of it in this library */
    float x = 1.0f; double end = now() + seconds;
    do { for (int i = 0; i < 20000; i++) x = x * 1.0000001f + 1e-7f; } while (now() < end);
    return x;
}
static void *worker(void *arg) { busy(*(double *)arg); return 0; }
int par_busy(int n, double seconds) {  /* n threads, created by the call */
    pthread_t t[16]; if (n > 16) n = 16;
    for (int i = 0; i < n; i++) pthread_create(&t[i], 0, worker, &seconds);
    for (int i = 0; i < n; i++) pthread_join(t[i], 0);
    return n;
}
unsigned long long mix(unsigned long long n) {
    unsigned long long x = 1;
    for (unsigned long long i = 0; i < n; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL + (x >> 29);
    return x;
}
"""
# argv: library, mode. Prints "ready", works after a line on stdin, prints "done", exits after another.
CHILD = r"""
import ctypes, os, select, signal, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.busy.argtypes, lib.busy.restype = [ctypes.c_double], ctypes.c_double
lib.par_busy.argtypes = [ctypes.c_int, ctypes.c_double]
lib.mix.argtypes, lib.mix.restype = [ctypes.c_ulonglong], ctypes.c_ulonglong
mode = sys.argv[2]
if mode in ("torch", "hybrid"):
    import torch
    torch.set_num_threads(1)
    a, b, c = torch.randn(384, 384), torch.randn(384, 384), torch.empty(384, 384)
def mm(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(a, b, out=c)
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
print("ready", flush=True)
sys.stdin.readline()
if mode == "own":
    for _ in range(4):
        lib.busy(0.2)
elif mode == "torch":
    mm(0.8)
elif mode == "hybrid":
    for _ in range(8):
        lib.busy(0.05)
        mm(0.05)
elif mode == "threads":
    lib.par_busy(4, 0.4)
elif mode == "fork":  # the work is done by a forked child
    pid = os.fork()
    if pid == 0:
        lib.busy(0.4)
        os._exit(7)
    print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
elif mode == "exit":
    lib.busy(0.3)
    print(lib.mix(100000), flush=True)
    sys.exit(3)
elif mode == "progress":  # count progress in a file until stdin has a line
    fd, n = os.open(sys.argv[3], os.O_WRONLY | os.O_CREAT), 0
    while not select.select([sys.stdin], [], [], 0)[0]:
        n += 1
        lib.busy(0.002)
        os.pwrite(fd, b"%012d" % n, 0)
    sys.stdin.readline()
    print("signals", len(got), flush=True)
print(lib.mix(100000), flush=True)
print("done", flush=True)
sys.stdin.readline()
"""


def expected_mix(n: int) -> int:
    x, mask = 1, (1 << 64) - 1
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407 + (x >> 29)) & mask
    return x


def build_busy_library(root: Path) -> Path:
    """C_SOURCE built as `root/libbusy.so` (skips the test without gcc)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the test library")
    (root / "busy.c").write_text(C_SOURCE)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(root / "libbusy.so"), str(root / "busy.c"),
                    "-lpthread"], check=True)
    return root / "libbusy.so"


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not sampling_available():
        pytest.skip("ptrace sampling of a child is not permitted or not supported here")
    return build_busy_library(tmp_path_factory.mktemp("own"))


def spawn(lib: Path, mode: str, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(lib), mode, *extra], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.stdout.readline().strip() == "ready"
    return proc


def tell(proc: subprocess.Popen) -> None:
    proc.stdin.write("go\n")
    proc.stdin.flush()


def sample_run(lib: Path, mode: str) -> tuple[PcSamples, subprocess.Popen, list[str]]:
    """Sample one run of `mode` from its start to its "done"; the child is left waiting to exit."""
    proc = spawn(lib, mode)
    sampler = PcSampler(proc.pid, hz=HZ)
    sampler.start()
    watchdog = threading.Timer(60, sampler.stop)  # a child stuck by the sampler fails instead of hanging
    watchdog.start()
    tell(proc)
    lines = []
    while (line := proc.stdout.readline().strip()) not in ("done", ""):
        lines.append(line)
    watchdog.cancel()
    assert not sampler.wait(0), "the child was stuck until sampling stopped"
    samples = sampler.stop()
    assert samples.error is None, samples.error
    assert int(lines[-1]) == expected_mix(100000)
    return samples, proc, lines[:-1]


def finish(proc: subprocess.Popen) -> None:
    """The child, no longer traced, exits 0 when told to."""
    assert tracer_of(proc.pid) == 0
    tell(proc)
    assert proc.wait(timeout=30) == 0


def tracer_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("TracerPid:"))


def test_classification_table() -> None:
    """Own code is told by identity only; everything else by the object's path, failing closed."""
    own = {(7, 11)}
    for path in ("/x/torch/lib/libtorch_cpu.so", "/x/numpy.libs/libscipy_openblas64_-ff.so",
                 "/x/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so", "/opt/intel/libmkl_core.so.2",
                 "/usr/lib/liblapack.so.3", "/tmp/torchinductor_root/ab/cabc.so", "[anon]", "/x/scipy/ndimage/_nd_image.so",
                 "/tmp/kernelrl-eval-1/torchinductor/ab/cabc.so", "/tmp/kernelrl-eval-1/libopenblas.so"):
        assert object_class(path) == "fallback", path
    for path in ("/usr/bin/python3.11", "/x/lib/libpython3.11.so.1.0", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                 "/x/torch/lib/libc10.so", "/x/torch/lib/libtorch_python.so",
                 "/lib64/ld-linux-x86-64.so.2", "/x/torch/lib/libgomp.so.1", "[vdso]", "[unknown]",
                 "/x/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so", "/usr/lib/libm.so.6"):
        assert object_class(path) == "overhead", path
    samples = PcSamples({"/builds/abc/lib.so": 30, "/x/libtorch_cpu.so": 10, "[vdso]": 5, "/work/copy.so": 4}, 49, 1,
                        identities={"/builds/abc/lib.so": (7, 11), "/x/libtorch_cpu.so": (7, 12), "/work/copy.so": (7, 13)})
    coverage = classify(samples, own)
    assert (coverage.own, coverage.fallback, coverage.overhead) == (30, 14, 5)
    # the same path with another identity is not own, and a path alone never is
    assert classify(PcSamples({"/builds/abc/lib.so": 3}, 3, 1, identities={"/builds/abc/lib.so": (7, 99)}), own).own == 0
    assert classify(PcSamples({"/builds/abc/lib.so": 3}, 3, 1), own).own == 0
    assert classify(PcSamples({"[vdso]": 5}, 5, 1), own).fraction is None


def test_own_library_dominates(lib: Path) -> None:
    samples, proc, _ = sample_run(lib, "own")
    coverage = classify(samples, file_identities([lib]))
    assert coverage.total > 0.5 * 0.8 * HZ, samples  # most of 0.8 s of one thread was sampled
    assert coverage.fraction > 0.8, samples
    finish(proc)


def test_torch_is_fallback(lib: Path) -> None:
    samples, proc, _ = sample_run(lib, "torch")
    coverage = classify(samples, file_identities([lib]))
    assert coverage.fraction < 0.1, samples
    assert coverage.fallback > coverage.own + coverage.overhead, samples
    finish(proc)


def test_hybrid_is_in_between(lib: Path) -> None:
    samples, proc, _ = sample_run(lib, "hybrid")
    coverage = classify(samples, file_identities([lib]))
    assert 0.25 < coverage.fraction < 0.75, samples
    finish(proc)


def test_threads_created_while_sampling(lib: Path) -> None:
    samples, proc, _ = sample_run(lib, "threads")
    coverage = classify(samples, file_identities([lib]))
    assert samples.threads_seen >= 3, samples
    # four threads for 0.4 s: more own time than one thread could have had
    assert coverage.own > 2 * 0.4 * HZ, samples
    assert coverage.fraction > 0.8, samples
    finish(proc)


def test_forked_child_is_followed(lib: Path) -> None:
    samples, proc, lines = sample_run(lib, "fork")
    assert lines == ["child 7"]  # its parent got its exit status while both were traced
    assert classify(samples, file_identities([lib])).own > 0.5 * 0.4 * HZ, samples
    assert samples.threads_seen >= 2, samples
    finish(proc)


def test_process_that_exits_ends_sampling(lib: Path) -> None:
    proc = spawn(lib, "exit")
    sampler = PcSampler(proc.pid, hz=HZ)
    sampler.start()
    tell(proc)
    assert sampler.wait(timeout=30), "sampling did not end with the process"
    samples = sampler.stop()
    assert samples.error is None and classify(samples, file_identities([lib])).fraction > 0.8, samples
    assert proc.wait(timeout=10) == 3  # the exit status is left for the parent
    assert int(proc.stdout.read().strip()) == expected_mix(100000)


def read_progress(path: Path) -> int:
    return int(path.read_bytes() or b"0")


def test_signals_still_work(lib: Path, tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    proc = spawn(lib, "progress", str(progress))
    sampler = PcSampler(proc.pid, hz=HZ)
    sampler.start()
    tell(proc)
    deadline = time.monotonic() + 10
    while not progress.exists() or read_progress(progress) < 5:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for _ in range(3):  # a signal the program handles is delivered
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(0.05)

    def assert_stopped() -> None:
        time.sleep(0.1)
        before = read_progress(progress)
        time.sleep(0.3)
        assert read_progress(progress) == before, "SIGSTOP did not stop the process"

    def assert_running() -> None:
        before = read_progress(progress)
        time.sleep(0.3)
        assert read_progress(progress) > before, "SIGCONT did not resume the process"

    os.kill(proc.pid, signal.SIGSTOP)
    assert_stopped()
    os.kill(proc.pid, signal.SIGCONT)
    assert_running()
    os.kill(proc.pid, signal.SIGSTOP)  # stopped when sampling stops: it stays stopped after the detach
    time.sleep(0.1)
    samples = sampler.stop()
    assert samples.error is None and samples.total > 0, samples
    assert tracer_of(proc.pid) == 0
    assert_stopped()
    os.kill(proc.pid, signal.SIGCONT)
    assert_running()
    tell(proc)
    assert proc.stdout.readline().strip() == "signals 3"
    assert int(proc.stdout.readline()) == expected_mix(100000)
    assert proc.stdout.readline().strip() == "done"
    finish(proc)
