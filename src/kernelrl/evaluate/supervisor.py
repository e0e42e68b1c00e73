"""A warm worker: torch imported once; every evaluation runs in a forked, disposable child.

The supervisor never runs candidate code itself. For each job it forks a child that sets resource
limits, redirects its output to a private file and runs the pipeline; the supervisor applies each
stage's wall-clock limit, kills the child's whole process group on timeout, turns a dead child into a
`crashed` result, and answers the pool with exactly one result per job.

Run as `python -m kernelrl.evaluate.supervisor` (jobs on stdin, results on stdout, JSON lines), or
with `--oneshot JOB.json` to evaluate a single job in a fresh process.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import importlib
import json
import os
import resource
import secrets
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from typing import Any

from kernelrl.evaluate.backends import BACKENDS, get_backend
from kernelrl.evaluate.builds import MAX_REQUEST_BYTES, BadRequest, BuildService, send_reply
from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.candidate_process import CandidateProcess
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.confine import (
    cpus_for_slot,
    install_seccomp,
    kill_descendants,
    make_subreaper,
    make_undumpable,
    reap_zombies,
    set_affinity,
)
from kernelrl.evaluate.exchange import Channel
from kernelrl.evaluate.feedback import build_feedback
from kernelrl.evaluate.judge import Judge
from kernelrl.evaluate.protocol import (
    MessageReader,
    ProtocolError,
    write_message,
)
from kernelrl.evaluate.result import EvalResult, StageReport, Status
from kernelrl.evaluate.runner import serve_candidate
from kernelrl.evaluate.sandbox import SANDBOX_ENV, build_uid, drop_privileges
from kernelrl.native.build import BuildBroker, cache_dir, set_build_broker
from kernelrl.tasks.task import Task

OUTPUT_HEAD_BYTES = 2048
OUTPUT_TAIL_BYTES = 2048
EXIT_GRACE_S = 5.0
STAGE_ORDER = ("static", "build", "init", "correctness", "timing")
COMPILE_OUTPUT_LIMIT_MB = 1024  # file-size limit of the torch.compile reference (Inductor's headers)
COMPILE_TIMEOUT_S = 600.0  # its correctness stage, which runs Inductor's compile


def _sign(key: bytes, payload: str) -> str:
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()


def _signed(key: bytes, message: dict[str, Any]) -> dict[str, Any]:
    """Messages from the evaluated process carry an HMAC under a per-job key, so bytes that candidate
    code writes to the channel (a forged verdict) are told apart from the evaluator's own."""
    payload = json.dumps(message)
    return {"payload": payload, "mac": _sign(key, payload)}


def _stage_timeout(config: EvalConfig, stage: str) -> float:
    t = config.timeouts
    return {"static": t.build, "build": t.build, "init": t.init, "correctness": t.correctness, "timing": t.timing}[stage]


def _limit(kind: int, value: int) -> None:
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass


PROTOCOL_FDS: list[int] = []  # the supervisor's channel to the pool, closed in every child


def _judge_main(
    job: dict[str, Any], key: bytes, write_fd: int, build_fds: tuple[int, int], workdir: str, output_path: str
) -> None:
    """Runs in the forked judge; never returns. It forks the candidate process first (before it holds
    anything the verdict depends on), then judges it. `build_fds`: the candidate's pipe ends to the build
    service (request, reply)."""
    status = 0
    try:
        os.setpgid(0, 0)
        for fd in PROTOCOL_FDS:
            os.close(fd)
        config = EvalConfig.from_dict(job["config"])
        devnull = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):  # the task's own prints go nowhere; the candidate's go to its output file
            os.dup2(devnull, target)
        os.close(devnull)
        cpus = cpus_for_slot(int(os.environ.get("KERNELRL_WORKER_SLOT", "0")), config.num_threads)
        judge_sock, candidate_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            os.close(write_fd)
            judge_sock.close()
            _candidate_main(job, config, candidate_sock.fileno(), build_fds, workdir, output_path, cpus)
        candidate_sock.close()
        for fd in build_fds:
            os.close(fd)
        make_undumpable()  # a same-uid candidate can neither trace the judge nor open its /proc files
        _limit(resource.RLIMIT_AS, config.memory_limit_mb * 2**20)
        _limit(resource.RLIMIT_CORE, 0)
        # The judge is not pinned to the candidate's CPUs: its sampler thread must run while the candidate computes.
        import torch

        torch.set_num_threads(config.num_threads)

        def announce(stage: str, timeout: float) -> None:
            write_message(write_fd, _signed(key, {"event": "stage", "stage": stage}))

        process = CandidateProcess(pid, Channel(judge_sock), _describe_exit, config.memory_limit_mb * 2**20)
        judge = Judge(Task.from_dict(job["task"]), Candidate(**job["candidate"]), config, announce, process,
                      own_objects=_own_objects(job, workdir))
        result = judge.run(job.get("cached_reference"), bool(job.get("compile_candidate")))
        _confinement_notes(result, pid)
        _end_candidate(pid)
        write_message(write_fd, _signed(key, {"event": "result", "result": result.to_dict()}))
    except BaseException:
        status = 70
        try:
            write_message(write_fd, _signed(key, {"event": "error", "traceback": traceback.format_exc()[-4000:]}))
        except Exception:
            pass
    finally:
        os._exit(status)


def _candidate_main(
    job: dict[str, Any], config: EvalConfig, sock_fd: int, build_fds: tuple[int, int], workdir: str,
    output_path: str, cpus: list[int],
) -> None:
    """Runs in the forked candidate process; never returns. Confines itself (output file, rlimits, CPUs,
    uid, seccomp) before any candidate code exists in it, then serves the judge's requests."""
    status = 0
    try:
        os.setpgid(0, 0)  # its own group: the judge's kill reaches everything it starts (setsid is denied)
        set_build_broker(BuildBroker(*build_fds))
        out = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
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
        import torch

        torch.set_num_threads(config.num_threads)
        backend = get_backend(job["candidate"]["backend"])
        device = str(backend.device(config.device_index))
        install_seccomp(os.getpid())
        serve_candidate(sock_fd, job["candidate"]["backend"], device, config.guards)
    except BaseException:
        status = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _own_objects(job: dict[str, Any], workdir: str) -> tuple[str, ...] | None:
    """Where the candidate's own built code lives (native and torch-extension caches, its work directory),
    for the coverage profile; None where the backend's compute cannot be attributed on this machine
    (the Triton interpreter computes with numpy; GPU kernels are not on the CPU) or sampling is unavailable."""
    from kernelrl.evaluate.perf_sampler import sampling_method

    if job["candidate"]["backend"] != "cpu" or sampling_method() is None:
        return None
    cache = str(cache_dir())
    return (os.path.join(cache, "native"), os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(cache, "torch_extensions"), workdir)


def _end_candidate(pid: int) -> None:
    """Kill the candidate's process group and reap it (the supervisor then finds little or nothing left)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
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


def _read_output(path: str) -> tuple[str, int]:
    """Head and tail of what the child printed (decoded leniently), and the total size in bytes."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            head = handle.read(OUTPUT_HEAD_BYTES)
            if size > OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES:
                handle.seek(size - OUTPUT_TAIL_BYTES)
                head += f"\n... [{size - OUTPUT_HEAD_BYTES - OUTPUT_TAIL_BYTES} bytes cut] ...\n".encode()
            head += handle.read()
    except OSError:
        return "", 0
    return head.decode("utf-8", errors="replace"), size


def _describe_exit(status: int) -> str:
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


class Supervisor:
    def __init__(self) -> None:
        self.jobs_run = 0
        self.builds = BuildService(build_uid())

    def run_job(self, job: dict[str, Any]) -> dict[str, Any]:
        """Evaluate one job. Unless the job brings a reference timing (the pool's cache, the service's
        store), the reference is timed first in a child of its own and handed to the candidate's child."""
        started = time.perf_counter()
        config = EvalConfig.from_dict(job["config"])
        backend = job["candidate"]["backend"]
        _preload_for(backend)
        reference = None
        if config.measure_timing and not job.get("cached_reference") and get_backend(backend).timing_meaningful():
            reference = self._time_reference(job)
            if reference is not None:
                job = {**job, "cached_reference": reference}
        result = self._run_child(job, config)
        if reference is not None and result.timing is not None and result.timing.reference_cached:
            result.timing.reference_cached = False  # measured for this job, in a process of its own
            result.notes.append("reference timed in a separate process that ran no candidate code")
        result.total_s = time.perf_counter() - started
        result.feedback = build_feedback(result)
        self.jobs_run += 1
        return result.to_dict()

    def _time_reference(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """Time the task's reference in a process that runs no candidate code (the task's own `Model` as
        `ModelNew`): a candidate can then neither slow the reference it is compared with (background work,
        patching the reference module) nor poison the timing that later candidates reuse. None when the
        reference does not run (its failure is then reported by the candidate's own evaluation)."""
        task = job["task"]
        reference_job = {
            **job,
            "candidate": {**job["candidate"], "source": f"{task['source']}\n\nModelNew = Model\n"},
            "config": {**job["config"], "guards": False, "static_severity": {"*": "warn"}, "correctness_trials": 1},
            "cached_reference": {"reference_ms": 1.0, "reference_spread_ms": 0.0},  # placeholder: not used
        }
        config = EvalConfig.from_dict(reference_job["config"])
        eager = self._run_child(reference_job, config).timing
        if eager is None or eager.candidate_ms is None:
            return None
        entry = {"reference_ms": eager.candidate_ms, "reference_spread_ms": eager.candidate_spread_ms,
                 "compiled_reference_ms": None}
        if job["config"].get("compile_baseline"):
            # Inductor writes precompiled headers of torch's C++ (100+ MB): the task's own reference, not
            # candidate code, so its file-size limit is raised (at 64 MB g++ died of SIGXFSZ), and Inductor's
            # compile (in the first forward, a minute or more on a busy machine) gets COMPILE_TIMEOUT_S
            timeouts = {**(reference_job["config"].get("timeouts") or {})}
            timeouts["correctness"] = max(float(timeouts.get("correctness", config.timeouts.correctness)), COMPILE_TIMEOUT_S)
            limits = {**reference_job["config"], "output_limit_mb": max(config.output_limit_mb, COMPILE_OUTPUT_LIMIT_MB),
                      "timeouts": timeouts}
            compile_job = {**reference_job, "config": limits, "compile_candidate": True}
            compiled = self._run_child(compile_job, EvalConfig.from_dict(limits))
            entry["compiled_reference_ms"] = compiled.timing.candidate_ms if compiled.timing is not None else None
            if entry["compiled_reference_ms"] is None:
                reason = (compiled.error or "no time was measured").strip().splitlines()
                entry["compiled_reference_note"] = f"torch.compile baseline not timed ({compiled.status}): {reason[-1][:300] if reason else ''}"
        return entry

    def _run_child(self, job: dict[str, Any], config: EvalConfig) -> EvalResult:
        """Fork a disposable child for `job`, serve its builds, follow its stages; its result (never raises
        for anything the child does)."""
        workdir = tempfile.mkdtemp(prefix="kernelrl-eval-")
        output_path = os.path.join(workdir, ".output")
        key = secrets.token_bytes(32)
        read_fd, write_fd = os.pipe()
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            for fd in (read_fd, request_read, reply_write):
                os.close(fd)
            _judge_main(job, key, write_fd, (request_write, reply_read), workdir, output_path)
        for fd in (write_fd, request_write, reply_read):
            os.close(fd)
        os.set_blocking(reply_write, False)  # a child that stops reading must not block the supervisor
        try:
            builds = MessageReader(request_read, MAX_REQUEST_BYTES)
            result = self._watch(pid, MessageReader(read_fd), (builds, reply_write), job, config, key)
        finally:
            for fd in (read_fd, request_read, reply_write):
                os.close(fd)
            _kill_group(pid)
            kill_descendants()  # the candidate's group, and anything that left it, re-parented here
            reap_zombies()  # they re-parented to this subreaper: unreaped, they would count against the uid's NPROC
            output, size = _read_output(output_path)
            shutil.rmtree(workdir, ignore_errors=True)
        result.output_tail = output
        if size > config.output_limit_mb * 2**20 * 0.99:
            result.notes.append(f"the candidate printed {size / 2**20:.1f} MiB, at the output limit")
        return result

    def _watch(
        self,
        pid: int,
        reader: MessageReader,
        build_channel: tuple[MessageReader, int],
        job: dict[str, Any],
        config: EvalConfig,
        key: bytes,
    ) -> EvalResult:
        """Follow the child's signed stage announcements (in order, each limited by the evaluator's own
        configured timeout) until its one verdict; anything else it sends is a forgery. Meanwhile serve
        its build requests (`build_channel`: requests in, reply fd); build time counts against the stage."""
        builds, reply_fd = build_channel
        stage, stage_started = "static", time.monotonic()
        deadline = stage_started + _stage_timeout(config, stage)
        result: EvalResult | None = None
        failure: tuple[Status, str] | None = None
        while True:
            try:
                channel, envelope = _next_message(reader, builds, deadline)
            except TimeoutError:
                if result is not None:  # verdict in, but the process lingers: stop waiting for it
                    break
                failure = (Status.TIMEOUT, f"stage '{stage}' exceeded its {deadline - stage_started:.0f} s limit")
                break
            except BadRequest as exc:
                failure = (Status.REJECTED, f"[forged-message] the evaluated process sent a malformed build request: {exc}")
                break
            except ProtocolError as exc:
                failure = (Status.REJECTED, f"[forged-message] the evaluated process wrote garbage to the verdict channel: {exc}")
                break
            if channel == "build":
                if result is not None or envelope is None:
                    continue
                try:
                    reply = self.builds.handle(envelope, deadline)
                except BadRequest as exc:
                    failure = (Status.REJECTED, f"[forged-message] the evaluated process sent a malformed build request: {exc}")
                    break
                except Exception:
                    failure = (Status.CRASHED, "internal error in the build service:\n" + traceback.format_exc()[-4000:])
                    break
                if reply is not None:
                    send_reply(reply_fd, (json.dumps(reply) + "\n").encode(), deadline)
                continue
            if envelope is None:
                break
            payload, mac = envelope.get("payload"), envelope.get("mac")
            if not isinstance(payload, str) or not isinstance(mac, str) or not hmac.compare_digest(mac, _sign(key, payload)):
                failure = (Status.REJECTED, "[forged-message] a message on the verdict channel was not written by the evaluator")
                break
            message = json.loads(payload)
            event = message.get("event")
            if result is not None:
                failure = (Status.REJECTED, "[forged-message] more than one verdict was written for one evaluation")
                break
            if event == "stage":
                name = message.get("stage")
                if name not in STAGE_ORDER or (STAGE_ORDER.index(name) <= STAGE_ORDER.index(stage) and name != "static"):
                    failure = (Status.REJECTED, f"[forged-message] out-of-order stage {name!r} after {stage!r}")
                    break
                stage, stage_started = name, time.monotonic()
                deadline = stage_started + _stage_timeout(config, stage)
            elif event == "result":
                try:
                    result = EvalResult.from_dict(message["result"])
                except (KeyError, TypeError, ValueError) as exc:
                    failure = (Status.CRASHED, f"the evaluated process sent an unreadable result: {exc}")
                    break
                deadline = time.monotonic() + EXIT_GRACE_S
            elif event == "error":
                failure = (Status.CRASHED, "internal error in the evaluator:\n" + str(message.get("traceback", "")))
                break
        _kill_group(pid)
        _, status = os.waitpid(pid, 0)
        if failure is None and result is None:
            failure = (Status.CRASHED, _describe_exit(status) + f" (during stage '{stage}')")
        if failure is not None:
            return _failed_result(job, stage, time.monotonic() - stage_started, *failure)
        assert result is not None
        return result


def _next_message(
    verdicts: MessageReader, builds: MessageReader, deadline: float
) -> tuple[str, dict[str, Any] | None]:
    """The next message from either channel: ("verdict", message or None at its end) or ("build", request).

    Verdict-channel messages go first, so a stage announced before a build request is in force when
    the request is served. Raises TimeoutError past `deadline`, BadRequest for garbage on the build
    channel and ProtocolError for garbage on the verdict channel."""
    while True:
        message = verdicts.buffered()
        if message is not None or verdicts.closed:
            return "verdict", message
        try:
            request = builds.buffered()
            if request is not None:
                return "build", request
        except ProtocolError as exc:
            raise BadRequest(str(exc)) from None
        fds = [verdicts.fd] + ([] if builds.closed else [builds.fd])
        ready, _, _ = select.select(fds, [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError
        if verdicts.fd in ready:
            verdicts.fill()
        if builds.fd in ready:
            try:
                builds.fill()
            except ProtocolError as exc:
                raise BadRequest(str(exc)) from None


def _failed_result(job: dict[str, Any], stage: str, duration: float, status: Status, message: str) -> EvalResult:
    task = job["task"]
    return EvalResult(
        status=status,
        task_id=task["id"],
        backend=job["candidate"]["backend"],
        stages=[StageReport(name=stage, status=str(status), duration_s=duration, message=message)],
        error=message,
        size_overrides={k: list(v) for k, v in (task.get("size_overrides") or {}).items()},
    )


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_PRELOADED: set[str] = set()



def _preload_for(backend: str) -> None:
    """Import a backend's heavy modules once here, so forked children start warm."""
    if backend in _PRELOADED:
        return
    spec = get_backend(backend)
    os.environ.update(spec.env)
    for module in spec.preload:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    _PRELOADED.add(backend)


def _backend_environment() -> None:
    """Set every backend's environment (TRITON_INTERPRET=1 without a GPU) before anything imports its
    modules. Triton reads the flag when it decorates its own library functions at import (tl.max and
    tl.sum are @triton.jit functions): imported first without it, they are compiled-mode functions that
    an interpreted kernel cannot call ("Cannot call @triton.jit'd outside of the scope of a kernel")."""
    for name in BACKENDS.names():
        os.environ.update(get_backend(name).env)
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") == "1":
        print("kernelrl: triton was imported before TRITON_INTERPRET=1 was set; its reductions will fail "
              "under the interpreter", file=sys.stderr)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def keep_freed_memory(largest_block: int = 32 * 2**20) -> bool:
    """Make glibc keep freed blocks (up to `largest_block` bytes each) for reuse instead of returning them
    to the OS.

    Otherwise each forked evaluation's heap layout decides whether a tensor freed by one call is
    handed back (and the next call's output page-faults in afresh) or reused, which changes timings
    by tens of percent between evaluations of the same code. Kept memory makes every call after the
    warm-up reuse blocks, as PyTorch's CUDA caching allocator does on a GPU. Children inherit the
    setting through fork. Returns False where the C library has no `mallopt` (not glibc).
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, largest_block)) and bool(mallopt(M_TRIM_THRESHOLD, max(2**30, 2 * largest_block)))


def _warm() -> None:
    """Pay one-time initialisation here, once, instead of in every forked evaluation."""
    _backend_environment()  # first: the warm-up below imports triton (torch's dispatcher does)
    import torch

    make_subreaper()  # processes an evaluation leaves behind re-parent here, where kill_descendants finds them
    from kernelrl.evaluate.perf_sampler import sampling_method

    sampling_method()  # probed once here (a child process, ~0.1 s); forked judges inherit the answer
    keep_freed_memory()

    from kernelrl.evaluate.guards import OpCounter
    from kernelrl.evaluate.kernel_calls import install_extension_counter

    install_extension_counter()  # imports torch.utils.cpp_extension (~0.1 s) once, here
    with OpCounter():  # the Python dispatcher's first use costs seconds; tensors are tiny (no thread pool)
        torch.empty(4).add_(1).relu_()

    from kernelrl.native.build import compiler_for, compiler_identity
    from kernelrl.native.diagnostics import toolchain_include_dirs

    try:  # paid here once, not inside a candidate's build stage
        compiler_identity(compiler_for("c++"))
        toolchain_include_dirs(compiler_for("c++"), "c++")
    except Exception:
        pass
    _preload_for("cpu")


def serve(in_fd: int, out_fd: int) -> None:
    """Answer jobs from `in_fd` with results on `out_fd`, one JSON line each, until end of input."""
    _warm()
    supervisor = Supervisor()
    write_message(out_fd, {"event": "ready", "pid": os.getpid()})
    reader = MessageReader(in_fd)
    while True:
        job = reader.read(None)
        if job is None:
            return
        try:
            reply = {"event": "result", "id": job.get("id"), "result": supervisor.run_job(job)}
        except Exception:
            reply = {"event": "error", "id": job.get("id"), "traceback": traceback.format_exc()[-4000:]}
        write_message(out_fd, reply)


def main() -> None:
    parser = argparse.ArgumentParser(description="kernelrl evaluation worker")
    parser.add_argument("--oneshot", help="evaluate one job (JSON file) and print the result")
    args = parser.parse_args()
    # Keep the protocol channel away from fds 0-2, which the children take over.
    in_fd, out_fd = os.dup(0), os.dup(1)
    PROTOCOL_FDS.extend([in_fd, out_fd])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    if args.oneshot:
        _warm()
        with open(args.oneshot) as handle:
            job = json.load(handle)
        write_message(out_fd, {"event": "result", "result": Supervisor().run_job(job)})
        return
    serve(in_fd, out_fd)


if __name__ == "__main__":
    main()
