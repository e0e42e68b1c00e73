"""A warm worker: torch imported once; every evaluation runs in a forked, disposable child.

The supervisor never runs candidate code itself. For each job it forks a child that sets resource
limits, writes its output to an unlinked file the supervisor owns (read back only through the
supervisor's own fd) and runs the pipeline; the supervisor applies each
stage's wall-clock limit, kills the child's whole process group on timeout, turns a dead child into a
`crashed` result, and answers the pool with exactly one result per job. The child is the judge, which
forks the candidate process (`child_processes`); what a worker pays once lives in `warm`.

Run as `python -m kernelrl.evaluate.supervisor` (jobs on stdin, results on stdout, JSON lines), or
with `--oneshot JOB.json` to evaluate a single job in a fresh process.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hmac
import json
import os
import secrets
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelrl.evaluate.backends import get_backend
from kernelrl.evaluate.builds import MAX_REQUEST_BYTES, BadRequest, BuildService, send_reply
from kernelrl.evaluate.child_processes import NO_SCRATCH_NOTE, describe_exit, judge_main, sign
from kernelrl.evaluate.config import COMPILE_TIMEOUT_S, EvalConfig
from kernelrl.evaluate.confine import kill_descendants
from kernelrl.evaluate.feedback import build_feedback
from kernelrl.evaluate.job import EvalJob
from kernelrl.evaluate.messages import MessageReader, ProtocolError, write_message
from kernelrl.evaluate.result import EvalResult, StageReport, Status
from kernelrl.evaluate.sandbox import build_uid, eval_uid, remove_leftovers, trusted_import_path
from kernelrl.evaluate.warm import preload_for, warm

OUTPUT_HEAD_BYTES = 2048
OUTPUT_TAIL_BYTES = 2048
STAGE_ORDER = ("static", "build", "init", "correctness", "timing")
COMPILE_OUTPUT_LIMIT_MB = 1024  # file-size limit of the torch.compile reference (Inductor's headers)


def _stage_timeout(config: EvalConfig, stage: str) -> float:
    t = config.timeouts
    return {"static": t.build, "build": t.build, "init": t.init, "correctness": t.correctness, "timing": t.timing}[stage]


def _output_file() -> int:
    """A file for the candidate's stdout/stderr that only this process can name: unlinked from birth
    (O_TMPFILE, else made and unlinked at once), mode 0600, owned by the supervisor. The candidate
    inherits it as fds 1 and 2; there is no path it could replace with a link or a FIFO."""
    directory = tempfile.gettempdir()
    try:
        return os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except (AttributeError, OSError):
        fd, path = tempfile.mkstemp(prefix=".kernelrl-output-", dir=directory)
        os.unlink(path)
        return fd


def _read_output(fd: int) -> tuple[str, int]:
    """Head and tail of what the child printed (decoded leniently) and the total size in bytes, read
    from the supervisor's own fd with bounded preads (a regular file: never blocks, never opens a path)."""
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, min(size, OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES), 0)
        if size > OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES:
            cut = f"\n... [{size - OUTPUT_HEAD_BYTES - OUTPUT_TAIL_BYTES} bytes cut] ...\n".encode()
            head = head[:OUTPUT_HEAD_BYTES] + cut + os.pread(fd, OUTPUT_TAIL_BYTES, size - OUTPUT_TAIL_BYTES)
    except OSError:
        return "", 0
    return head.decode("utf-8", errors="replace"), size


@dataclass
class _Judge:
    """A forked judge and the supervisor's ends of its channels: `job_fd` (the job, one JSON line),
    `verdicts` (signed stages and verdict), `requests`/`replies` (the candidate's build requests)."""

    pid: int
    key: bytes
    job_fd: int
    verdicts: int
    requests: int
    replies: int
    output_fd: int
    workdir: str
    memory_limit_mb: int

    def discard(self) -> None:
        """Close a judge that never got its job (it exits at the end of its job channel) and kill it."""
        for fd in (self.job_fd, self.verdicts, self.requests, self.replies, self.output_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        _kill_group(self.pid)
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class _Watch:
    """What the supervisor saw of one judge: when it started and announced its first stage."""

    started: float
    on_first_stage: Callable[[], None] | None = None
    first_stage: float | None = None

    def private_scratch(self, result: EvalResult) -> bool:
        """Whether the judge reported its verdict with a private scratch in force (no note that it was refused)."""
        return self.first_stage is not None and not any(n.startswith(NO_SCRATCH_NOTE) for n in result.notes)


def _fork_judge(memory_limit_mb: int) -> _Judge:
    """Fork a judge (`child_processes.judge_main`), which makes its private scratch and waits for its job."""
    workdir = tempfile.mkdtemp(prefix="kernelrl-eval-")
    output_fd = _output_file()
    key = secrets.token_bytes(32)
    read_fd, write_fd = os.pipe()
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    job_read, job_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd in (read_fd, request_read, reply_write, job_write):
            os.close(fd)
        judge_main(job_read, key, write_fd, (request_write, reply_read), workdir, output_fd, memory_limit_mb)
    for fd in (write_fd, request_write, reply_read, job_read):
        os.close(fd)
    os.set_blocking(reply_write, False)  # a child that stops reading must not block the supervisor
    return _Judge(pid, key, job_write, read_fd, request_read, reply_write, output_fd, workdir, memory_limit_mb)


class Supervisor:
    def __init__(self) -> None:
        self.jobs_run = 0
        self.builds = BuildService(build_uid())
        self.spare: _Judge | None = None  # the next evaluation's judge, forked while idle

    def run_job(self, job: EvalJob) -> dict[str, Any]:
        """Evaluate one job. Unless the job brings a reference timing (the pool's cache, the service's
        store), the reference is timed first in a child of its own and handed to the candidate's child."""
        started = time.perf_counter()
        config = job.config
        backend = job.candidate.backend
        preload_for(backend)
        reference, reference_s = None, 0.0
        if config.measure_timing and not job.cached_reference and not job.no_reference and \
                get_backend(backend).timing_meaningful():
            reference = self._time_reference(job)
            reference_s = time.perf_counter() - started
            if reference is not None:
                job = job.replace(cached_reference=reference)
        result = self._run_child(job, config)
        if reference_s:
            result.costs["reference"] = reference_s
        if reference is not None and result.timing is not None and result.timing.reference_cached:
            result.timing.reference_cached = False  # measured for this job, in a process of its own
            result.notes.append("reference timed in a separate process that ran no candidate code")
        result.total_s = time.perf_counter() - started
        result.feedback = build_feedback(result)
        self.jobs_run += 1
        return result.to_dict()

    def reference_for(self, job: EvalJob) -> dict[str, Any] | None:
        """The reference timing for `job`'s task and settings (the pool asks once per task, before its
        candidates run); None where timing is off or not meaningful, or the reference does not run."""
        preload_for(job.candidate.backend)
        if not job.config.measure_timing or not get_backend(job.candidate.backend).timing_meaningful():
            return None
        return self._time_reference(job)

    def _time_reference(self, job: EvalJob) -> dict[str, Any] | None:
        """Time the task's reference in a process that runs no candidate code (the task's own `Model` as
        `ModelNew`): a candidate can then neither slow the reference it is compared with (background work,
        patching the reference module) nor poison the timing that later candidates reuse. None when the
        reference does not run (its failure is then reported by the candidate's own evaluation)."""
        reference_job = job.replace(
            candidate=dataclasses.replace(job.candidate, source=f"{job.task.source}\n\nModelNew = Model\n"),
            config=job.config.replace(guards=False, static_severity={"*": "warn"}, correctness_trials=1),
            cached_reference={"reference_ms": 1.0, "reference_spread_ms": 0.0},  # placeholder: not used
            reference_only=True,
        )
        config = reference_job.config
        eager = self._run_child(reference_job, config).timing
        if eager is None or eager.candidate_ms is None:
            return None
        entry = {"reference_ms": eager.candidate_ms, "reference_spread_ms": eager.candidate_spread_ms,
                 "compiled_reference_ms": None}
        if job.config.compile_baseline:
            # Inductor writes precompiled headers of torch's C++ (100+ MB): the task's own reference, not
            # candidate code, so its file-size limit is raised (at 64 MB g++ died of SIGXFSZ), and Inductor's
            # compile (in the first forward, a minute or more on a busy machine) gets COMPILE_TIMEOUT_S
            timeouts = config.timeouts.replace(correctness=max(config.timeouts.correctness, COMPILE_TIMEOUT_S))
            limits = config.replace(output_limit_mb=max(config.output_limit_mb, COMPILE_OUTPUT_LIMIT_MB),
                                    timeouts=timeouts.to_dict())
            compile_job = reference_job.replace(config=limits, compile_candidate=True, reference_only=False)  # Inductor compiles in correctness
            compiled = self._run_child(compile_job, limits)
            entry["compiled_reference_ms"] = compiled.timing.candidate_ms if compiled.timing is not None else None
            if entry["compiled_reference_ms"] is None:
                reason = (compiled.error or "no time was measured").strip().splitlines()
                entry["compiled_reference_note"] = f"torch.compile baseline not timed ({compiled.status}): {reason[-1][:300] if reason else ''}"
        return entry

    def prepare(self, config: EvalConfig) -> None:
        """Fork the next evaluation's judge ahead of its job (while the current evaluation runs, or this
        worker is idle): it sets up its private scratch and then waits for the job, holding nothing yet
        (`judge_main`). A spare whose scratch does not fit the next job's config is discarded then."""
        if self.spare is None:
            self.spare = _fork_judge(config.memory_limit_mb)

    def _take_judge(self, config: EvalConfig) -> _Judge:
        """The spare judge when it fits `config`, else a freshly forked one."""
        spare, self.spare = self.spare, None
        if spare is not None and spare.memory_limit_mb == config.memory_limit_mb:
            return spare
        if spare is not None:
            spare.discard()
        return _fork_judge(config.memory_limit_mb)

    def _run_child(self, job: EvalJob, config: EvalConfig) -> EvalResult:
        """Hand `job` to a judge (forked ahead, or now), serve its builds, follow its stages; its result (never
        raises for anything the child does). `costs["spawn"]` and `costs["teardown"]`: this process's
        seconds before the judge's first stage and after its verdict."""
        started = time.perf_counter()
        _reap_exited()  # earlier evaluations' killed processes, left to exit while the pool read their results
        judge = self._take_judge(config)
        try:
            write_message(judge.job_fd, job.to_dict())
        except OSError:  # the spare died (killed from outside): fork one for this job
            judge.discard()
            judge = _fork_judge(config.memory_limit_mb)
            write_message(judge.job_fd, job.to_dict())
        os.close(judge.job_fd)
        # the next evaluation's judge is forked once this one runs (it holds nothing until its job comes)
        watch = _Watch(started, on_first_stage=lambda: self.prepare(config))
        try:
            builds = MessageReader(judge.requests, MAX_REQUEST_BYTES)
            result = self._watch(judge.pid, MessageReader(judge.verdicts), (builds, judge.replies), job, config,
                                 judge.key, watch)
        finally:
            verdict_at = time.perf_counter()
            for fd in (judge.verdicts, judge.requests, judge.replies):
                os.close(fd)
            _kill_group(judge.pid)
            # The candidate's group and anything that left it (re-parented here): killed, not waited for. A
            # killed process runs no more user code; it is reaped before the next evaluation starts.
            kill_descendants(wait=False, spare=self.spare.pid if self.spare is not None else None)
            output, size = _read_output(judge.output_fd)
            os.close(judge.output_fd)
            shutil.rmtree(judge.workdir, ignore_errors=True)  # symlink-safe (fd-relative); empty with a private /tmp
        # Without a private scratch (refused, or the judge never reported), the candidate's uid may have
        # left files in the shared scratch directories: deleted here.
        notes = remove_leftovers(eval_uid()) if not watch.private_scratch(result) else []
        result.output_tail = output
        result.notes.extend(notes)
        if size > config.output_limit_mb * 2**20 * 0.99:
            result.notes.append(f"the candidate printed {size / 2**20:.1f} MiB, at the output limit")
        if watch.first_stage is not None:
            result.costs["spawn"] = watch.first_stage - started
        result.costs["teardown"] = time.perf_counter() - verdict_at
        return result

    def _watch(
        self,
        pid: int,
        reader: MessageReader,
        build_channel: tuple[MessageReader, int],
        job: EvalJob,
        config: EvalConfig,
        key: bytes,
        watch: _Watch | None = None,
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
            if not isinstance(payload, str) or not isinstance(mac, str) or not hmac.compare_digest(mac, sign(key, payload)):
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
                if watch is not None and watch.first_stage is None:
                    watch.first_stage = time.perf_counter()
                    if watch.on_first_stage is not None:
                        watch.on_first_stage()
            elif event == "result":
                try:
                    result = EvalResult.from_dict(message["result"])
                except (KeyError, TypeError, ValueError) as exc:
                    failure = (Status.CRASHED, f"the evaluated process sent an unreadable result: {exc}")
                    break
                if reader.buffered() is not None:
                    failure = (Status.REJECTED, "[forged-message] more than one verdict was written for one evaluation")
                break  # the verdict is in: the judge is killed, not waited for while it tears its memory down
            elif event == "error":
                failure = (Status.CRASHED, "internal error in the evaluator:\n" + str(message.get("traceback", "")))
                break
        _kill_group(pid)
        if result is not None and failure is None:
            os.waitpid(pid, os.WNOHANG)  # a judge still tearing down is reaped later (`reap_zombies`)
            return result
        _, status = os.waitpid(pid, 0)
        if failure is None and result is None:
            failure = (Status.CRASHED, describe_exit(status) + f" (during stage '{stage}')")
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


def _failed_result(job: EvalJob, stage: str, duration: float, status: Status, message: str) -> EvalResult:
    return EvalResult(
        status=status,
        task_id=job.task.id,
        backend=job.candidate.backend,
        stages=[StageReport(name=stage, status=str(status), duration_s=duration, message=message)],
        error=message,
        size_overrides={k: list(v) for k, v in job.task.size_overrides.items()},
    )


def _reap_exited() -> None:
    """Collect every child that has exited (killed judges and the orphans this subreaper inherited); a
    spare judge still waiting for its job is alive and stays."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def serve(in_fd: int, out_fd: int) -> None:
    """Answer jobs from `in_fd` with results on `out_fd`, one JSON line each, until end of input."""
    warm()
    supervisor = Supervisor()
    write_message(out_fd, {"event": "ready", "pid": os.getpid()})
    reader = MessageReader(in_fd)
    while True:
        message = reader.read(None)
        if message is None:
            return
        try:
            job = EvalJob.from_dict(message)
            if job.op == "reference":
                reply = {"event": "reference", "id": job.id, "reference": supervisor.reference_for(job)}
            else:
                reply = {"event": "result", "id": job.id, "result": supervisor.run_job(job)}
        except Exception:
            reply = {"event": "error", "id": message.get("id") if isinstance(message, dict) else None, "traceback": traceback.format_exc()[-4000:]}
        write_message(out_fd, reply)


def trust_import_path() -> None:
    """Import only from directories no candidate can write, here and in every process forked from here
    (judges, the reference's timing child): `python -m` puts the cwd first, /tmp inside bubblewrap."""
    sys.path[:] = trusted_import_path(sys.path)
    if "PYTHONPATH" in os.environ:
        os.environ["PYTHONPATH"] = os.pathsep.join(trusted_import_path(os.environ["PYTHONPATH"].split(os.pathsep)))


def main() -> None:
    parser = argparse.ArgumentParser(description="kernelrl evaluation worker")
    parser.add_argument("--oneshot", help="evaluate one job (JSON file) and print the result")
    args = parser.parse_args()
    trust_import_path()
    # Keep the protocol channel away from fds 0-2, which the children take over.
    in_fd, out_fd = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    if args.oneshot:
        warm()
        with open(args.oneshot) as handle:
            job = EvalJob.from_dict(json.load(handle))
        write_message(out_fd, {"event": "result", "result": Supervisor().run_job(job)})
        return
    serve(in_fd, out_fd)


if __name__ == "__main__":
    main()
