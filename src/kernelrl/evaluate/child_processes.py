"""The two processes of one evaluation, forked by the supervisor for each job: the judge (trusted: it
holds the inputs, the reference outputs, the comparison, the clock and the per-job signing key) and the
candidate process it forks before it holds any of that, which confines itself before candidate code
exists in it. Their messages to the supervisor are signed with the job's key.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import resource
import signal
import socket
import sys
import time
import traceback
from typing import Any

from kernelrl.evaluate.backends import get_backend
from kernelrl.evaluate.candidate_client import CandidateProcess
from kernelrl.evaluate.candidate_server import serve_candidate
from kernelrl.evaluate.confine import (
    cpus_for_slot,
    install_seccomp,
    make_subreaper,
    make_undumpable,
    set_affinity,
)
from kernelrl.evaluate.exchange import Channel
from kernelrl.evaluate.job import EvalJob
from kernelrl.evaluate.judge import Judge
from kernelrl.evaluate.messages import MAX_MESSAGE_BYTES, write_message
from kernelrl.evaluate.result import EvalResult
from kernelrl.evaluate.sandbox import SANDBOX_ENV, drop_privileges, private_scratch
from kernelrl.native.build import BuildBroker, cache_dir, set_build_broker


def sign(key: bytes, payload: str) -> str:
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()


def signed(key: bytes, message: dict[str, Any]) -> dict[str, Any]:
    """Messages from the evaluated process carry an HMAC under a per-job key, so bytes that candidate
    code writes to the channel (a forged verdict) are told apart from the evaluator's own."""
    payload = json.dumps(message)
    return {"payload": payload, "mac": sign(key, payload)}


def _limit(kind: int, value: int) -> None:
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass


NO_SCRATCH_NOTE = "no private /tmp, /var/tmp and /dev/shm for this evaluation"


def judge_main(
    job_fd: int, key: bytes, write_fd: int, build_fds: tuple[int, int], workdir: str, output_fd: int,
    memory_limit_mb: int,
) -> None:
    """Runs in the forked judge; never returns. Forked ahead of its job (while the worker is idle), it gives
    the evaluation scratch space of its own (`memory_limit_mb`: its /tmp's size) and waits for the job on
    `job_fd` (one JSON line from the supervisor; end of stream: the spare was discarded). It then forks the
    candidate process at once (before it loads the task or holds anything the verdict depends on) and
    judges it. `build_fds`: the candidate's pipe ends to the build service (request, reply); `output_fd`: the
    supervisor's unlinked file for the candidate's stdout/stderr."""
    status = 0
    try:
        os.setpgid(0, 0)
        # Only this evaluation's channels: a judge forked while another evaluation ran inherited that one's
        # ends too (and the worker's channel to the pool), which its candidate must never hold.
        close_fds_except({0, 1, 2, job_fd, write_fd, *build_fds, output_fd})
        devnull = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):  # the task's own prints go nowhere; the candidate's go to its output file
            os.dup2(devnull, target)
        os.close(devnull)
        scratch_note = _private_scratch(workdir, memory_limit_mb)
        make_subreaper()  # the candidate's orphans re-parent here, where its stop waits for them too
        # The candidate process is forked now, before the job: it starts with nothing of the evaluation in
        # its memory, and gets the job (what it needs to confine itself) from this judge over its socket.
        judge_sock, candidate_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            os.close(write_fd)
            os.close(job_fd)
            judge_sock.close()
            candidate_main(candidate_sock.fileno(), build_fds, workdir, output_fd)
        candidate_sock.close()
        os.close(output_fd)
        for fd in build_fds:
            os.close(fd)
        line = _read_line(job_fd)
        os.close(job_fd)
        if not line:
            os._exit(0)  # a spare the supervisor discarded; its candidate sees the socket close and exits
        job = EvalJob.from_dict(json.loads(line))
        config = job.config
        judge_sock.sendall(line + b"\n")
        make_undumpable()  # a same-uid candidate can neither trace the judge nor open its /proc files
        _limit(resource.RLIMIT_AS, config.memory_limit_mb * 2**20)
        _limit(resource.RLIMIT_CORE, 0)
        # The judge is not pinned to the candidate's CPUs: its sampler thread must run while the candidate computes.
        import torch

        torch.set_num_threads(config.num_threads)

        def announce(stage: str, timeout: float) -> None:
            write_message(write_fd, signed(key, {"event": "stage", "stage": stage}))

        process = CandidateProcess(pid, Channel(judge_sock), describe_exit, config.memory_limit_mb * 2**20)
        judge = Judge(job.task, job.candidate, config, announce, process, own_objects=_own_objects(job, workdir))
        result = judge.run(job.cached_reference, job.compile_candidate, job.reference_only)
        _confinement_notes(result, pid)
        result.costs["candidate_cpu"] = process.cpu_seconds()
        own = resource.getrusage(resource.RUSAGE_SELF)
        result.costs["judge_cpu"] = own.ru_utime + own.ru_stime
        if scratch_note:
            result.notes.append(scratch_note)
        _end_candidate(pid)
        write_message(write_fd, signed(key, {"event": "result", "result": result.to_dict()}))
    except BaseException:
        status = 70
        try:
            write_message(write_fd, signed(key, {"event": "error", "traceback": traceback.format_exc()[-4000:]}))
        except Exception:
            pass
    finally:
        os._exit(status)


def close_fds_except(keep: set[int]) -> None:
    """Close every open file descriptor of this process not in `keep`."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


MAX_JOB_BYTES = MAX_MESSAGE_BYTES


def _read_line(fd: int) -> bytes:
    """One newline-terminated line from `fd` (without the newline); b"" at end of stream."""
    chunks = bytearray()
    while not chunks.endswith(b"\n"):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b""
        chunks.extend(chunk)
    return bytes(chunks[:-1])


def _receive_line(sock_fd: int) -> bytes:
    """The first line on socket `sock_fd`, consuming nothing after it (the judge's requests follow);
    b"" at end of stream."""
    sock = socket.socket(fileno=sock_fd)
    size = 1 << 16
    try:
        while True:
            peek = sock.recv(size, socket.MSG_PEEK)
            if not peek:
                return b""
            end = peek.find(b"\n")
            if end >= 0:
                return sock.recv(end + 1, socket.MSG_WAITALL)[:-1]
            if len(peek) >= MAX_JOB_BYTES:
                raise ValueError(f"the job is larger than {MAX_JOB_BYTES} bytes")
            if len(peek) == size:
                size *= 4  # the line is longer than what was looked at
            else:
                time.sleep(0.0002)  # the rest of the line is on its way
    finally:
        sock.detach()


def candidate_main(sock_fd: int, build_fds: tuple[int, int], workdir: str, output_fd: int) -> None:
    """Runs in the forked candidate process; never returns. Waits for its job from the judge (end of stream:
    the judge was a discarded spare), confines itself (output fd, rlimits, CPUs, uid, seccomp) before any
    candidate code exists in it, then serves the judge's requests."""
    status = 0
    try:
        os.setpgid(0, 0)  # its own group: the judge's kill reaches everything it starts (setsid is denied)
        line = _receive_line(sock_fd)
        if not line:
            os._exit(0)
        job = EvalJob.from_dict(json.loads(line))
        config = job.config
        cpus = cpus_for_slot(int(os.environ.get("KERNELRL_WORKER_SLOT", "0")), config.num_threads)
        set_build_broker(BuildBroker(*build_fds))
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output_fd, 1)  # the supervisor's file, inherited: the candidate has no path to replace
        os.dup2(output_fd, 2)
        os.close(output_fd)
        os.close(devnull)
        _limit(resource.RLIMIT_AS, config.memory_limit_mb * 2**20)
        _limit(resource.RLIMIT_FSIZE, config.output_limit_mb * 2**20)
        _limit(resource.RLIMIT_CORE, 0)
        t = config.timeouts
        _limit(resource.RLIMIT_CPU, int((2 * t.build + t.init + t.correctness + t.timing) * config.num_threads) + 30)
        set_affinity(os.getpid(), cpus)
        drop_privileges(workdir)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; writing past the limit must kill
        os.chdir(workdir)
        os.environ["OMP_NUM_THREADS"] = str(config.num_threads)
        # torch.compile's cache in the evaluation's own directory: the shared /tmp/torchinductor_<user> may
        # belong to another uid (the candidate runs as its slot's uid), and must not be shared anyway
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(workdir, "torchinductor")
        # and load_inline's and Triton's too: the shared caches are the supervisors' alone (`prepare_cache`),
        # so nothing this evaluation builds is loaded by a later one, nor anything an earlier one planted
        os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(workdir, "torch_extensions")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(workdir, "triton")
        import torch

        torch.set_num_threads(config.num_threads)
        backend = get_backend(job.candidate.backend)
        device = str(backend.device(config.device_index))
        install_seccomp(os.getpid())
        serve_candidate(sock_fd, job.candidate.backend, device, config.guards)
    except BaseException:
        status = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _private_scratch(workdir: str, memory_limit_mb: int) -> str:
    """Fresh /tmp, /var/tmp and /dev/shm for this evaluation (`sandbox.private_scratch`), keeping what the
    evaluation reads from there (the build cache, import paths); a note where that was refused (the
    supervisor then deletes what the candidate's uid left, `sandbox.remove_leftovers`)."""
    import kernelrl

    keep = [str(cache_dir()), *sys.path, sys.prefix, sys.base_prefix, sys.exec_prefix,
            os.path.dirname(os.path.dirname(kernelrl.__file__)),
            *(os.environ.get(name, "") for name in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "CUDA_HOME"))]
    try:
        private_scratch(workdir, memory_limit_mb, [os.path.abspath(p) for p in keep if p])
    except (OSError, ValueError) as exc:
        return (f"{NO_SCRATCH_NOTE} ({exc}): they are shared with "
                "the worker's other evaluations; what the candidate's uid left there is deleted afterwards "
                "where it runs as a uid of its own")
    os.chdir("/")  # the worker's cwd (/tmp under bubblewrap) is no place to resolve anything
    return ""


def _own_objects(job: EvalJob, workdir: str) -> tuple[str, ...] | None:
    """Path prefixes of the candidate's build caches (attribution is by the broker's identity records, not these paths),
    for the coverage profile; None where the backend's compute cannot be attributed on this machine
    (the Triton interpreter computes with numpy; GPU kernels are not on the CPU) or sampling is unavailable."""
    from kernelrl.evaluate.perf_sampler import sampling_method

    if job.candidate.backend != "cpu" or sampling_method() is None:
        return None
    cache = str(cache_dir())
    return (os.path.join(cache, "native"), os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(cache, "torch_extensions"), workdir)


def _end_candidate(pid: int) -> None:
    """Kill the candidate's process group. Not waited for: the verdict need not wait for the kernel to
    tear down its memory; the supervisor (a subreaper) kills what is left and reaps it."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _confinement_notes(result: EvalResult, pid: int) -> None:
    """How the candidate process was confined, as the judge sees it from outside (its /proc status), in
    `environment["confinement"]`; a defence that did not hold is also named in the notes."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
    except OSError:
        return
    confinement = {
        "seccomp": fields.get("Seccomp", "").strip() == "2",
        "capabilities": int(fields.get("CapEff", "0").strip() or "0", 16) != 0,
        "own_uid": fields.get("Uid", "").split()[:1] != [str(os.getuid())],
        "bubblewrap": os.environ.get(SANDBOX_ENV) == "bwrap",
    }
    result.environment["confinement"] = confinement
    if not confinement["seccomp"]:
        result.notes.append("the candidate process ran without a seccomp filter")
    if confinement["capabilities"]:
        result.notes.append("the candidate process held capabilities: it could reach the judge")


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals.__members__.values() else str(sig)
        reason = {
            "SIGSEGV": "segmentation fault",
            "SIGBUS": "bus error",
            "SIGABRT": "aborted",
            "SIGKILL": "killed (out of memory or external kill)",
            "SIGXFSZ": "output file size limit exceeded",
            "SIGXCPU": "CPU time limit exceeded",
            "SIGFPE": "arithmetic exception",
        }.get(name, "killed by a signal")
        return f"the evaluated process died: {reason} ({name})"
    return f"the evaluated process exited with status {os.WEXITSTATUS(status)} before reporting a result"


