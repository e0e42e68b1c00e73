"""The judge's side of the candidate process: requests over the socket, tensors in and out.

`CandidateProcess` sends requests and reads replies (anything malformed is a forged message, a closed
channel a crash), ships inputs and weights in shared-memory arenas, and reads the outputs the candidate
describes straight from its memory (`exchange.read_remote`): whole for correctness, as runs of elements
chosen by a `SpotPlan` after timed calls.

A call's reply describes its outputs, and the moment it arrives the candidate's process group is stopped
(SIGSTOP, confirmed stopped) until the next request: nothing of the candidate runs between a call and the
read of its outputs, so work that would finish after the reply never happens, and the request's clock
(which ends once the candidate is stopped) holds all the work that made them. Descriptions are
untrusted: every size the judge reads or allocates is bounded, and outputs of two calls that share
memory are refused.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from kernelrl.evaluate.exchange import (
    Arena,
    Channel,
    decode_value,
    dtype_from_name,
    encode_value,
    parse_message,
    read_remote,
)
from kernelrl.evaluate.result import Status
from kernelrl.evaluate.spot_checks import SMALL_OUTPUT_BYTES, SPOT_RUN, SpotPlan

CANDIDATE_STATUSES = {"compile_error": Status.COMPILE_ERROR, "runtime_error": Status.RUNTIME_ERROR}
STOPPING_OPS = frozenset({"call", "proof_call", "ping"})  # after these replies the candidate is stopped until the next request
STOP_TIMEOUT_S = 2.0  # a candidate that has not stopped by then is refused
MAX_OUTPUT_LEAVES = 1 << 14  # tensor or value leaves in one call reply's descriptions
MAX_OUTPUT_DEPTH = 16  # nesting of lists in one output
MAX_OUTPUT_DIMS = 64


class _StopTimeout(Exception):
    pass


class StageFailed(Exception):
    """Stops the evaluation with a status; the stage's message goes into the result."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class CandidateProcess:
    """The judge's handle on the candidate process: requests and replies, the arenas it was sent, its
    outputs read from its memory, its CPU time."""

    def __init__(self, pid: int, channel: Channel, describe_exit: Callable[[int], str], max_output_bytes: int) -> None:
        self.pid, self.channel, self._describe_exit = pid, channel, describe_exit
        self.max_output_bytes = max_output_bytes  # described outputs of one reply larger than this are not read
        self.arenas: dict[str, Arena] = {}
        self.stopped = False  # the candidate's process group is stopped (after a call's or a ping's reply)
        self._exit_status: int | None = None  # taken while waiting for a stop
        self._outputs: Any = None  # the last call reply's output descriptions, as sent
        self._calls = 0  # calls in that request
        self.tracer: Any = None  # a ptrace sampler of the candidate (hold/wait_quiet/release), while one runs
        self._checked: list[Any] | None = None  # those descriptions, checked

    def request(self, message: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
        """Send a request and wait for the reply; a dead or babbling candidate ends the evaluation. After a
        call's (or a ping's) reply the candidate is stopped before this returns: the caller's clock ends
        with every thread of the candidate stopped."""
        op = message.get("op")
        try:
            self.resume()
            self.channel.send(message, fds)
            line = self.channel.receive_line()
            if line is not None and op in STOPPING_OPS:
                self.stop()
            reply = None if line is None else parse_message(line)
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and not self._alive():
                raise StageFailed(Status.CRASHED, self._gone()) from None
            raise StageFailed(Status.REJECTED, f"[forged-message] the candidate process broke the protocol: {exc}") from None
        if reply is None:
            raise StageFailed(Status.CRASHED, self._gone())
        if not isinstance(reply.get("ok"), bool):
            raise StageFailed(Status.REJECTED, "[forged-message] the candidate process sent something that is not a reply")
        if reply.get("ok") is not True:
            status = CANDIDATE_STATUSES.get(str(reply.get("status")), Status.RUNTIME_ERROR)
            raise StageFailed(status, str(reply.get("message", "the candidate process reported a failure"))[:8000])
        if op in ("call", "proof_call"):
            sets = message.get("sets") or [message["set"]]
            self._outputs, self._calls, self._checked = reply.get("outputs"), len(sets), None
        return reply

    def stop(self) -> None:
        """Stop the candidate's process group and wait until the candidate (every thread) and every process
        it forked that is still its descendant have stopped (SIGSTOP cannot be caught or ignored)."""
        tracer = self.tracer
        if tracer is not None:  # its stops of the candidate's threads stay stopped until resume()
            tracer.hold()
        try:
            os.killpg(self.pid, signal.SIGSTOP)
        except ProcessLookupError:
            os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True
        deadline = time.monotonic() + STOP_TIMEOUT_S
        try:
            # Only the judge's own ptrace sampler can trace the candidate (its seccomp filter denies ptrace, and
            # it runs under a uid of its own): reading /proc/<pid>/status for TracerPid cost ~40 us of every
            # ~100 us round trip. A tracer the judge did not start would take the stops for itself, and the
            # wait below would end in [unstoppable] at STOP_TIMEOUT_S: a rejection, never a missed stop.
            traced = tracer is not None and self._traced()
            if traced and tracer is not None and not tracer.wait_quiet(deadline):
                raise _StopTimeout
            if threading.current_thread() is not threading.main_thread() or traced or not self._wait_child():
                _wait_threads_stopped(self.pid, deadline)
            _wait_descendants_stopped(self.pid, deadline)
            _wait_orphans_stopped(self.pid, deadline)
        except _StopTimeout:
            raise StageFailed(Status.REJECTED, f"[unstoppable] the candidate process did not stop within {STOP_TIMEOUT_S:.0f} s "
                              "of its reply (a process of its group kept running); its outputs cannot be read") from None

    def resume(self) -> None:
        """Let the stopped candidate run again (before the next request)."""
        if self.stopped:
            self.stopped = False
            if self.tracer is not None:
                self.tracer.release()
            try:
                os.killpg(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def _traced(self) -> bool:
        """Whether a sampler traces the candidate (ptrace): its stops are the tracer's to wait for."""
        status = _read_proc(f"/proc/{self.pid}/status", 4096)
        start = status.find(b"TracerPid:")
        return start >= 0 and status[start + 10 : status.find(b"\n", start)].strip() not in (b"0", b"")

    def _wait_child(self) -> bool:
        """waitpid(WUNTRACED): the kernel reports the stop once every thread has stopped (the judge is the
        candidate's parent), bounded by an interval timer; an exit is kept for `_gone`. False where the
        candidate is not this process's child."""
        def expire(signum: int, frame: Any) -> None:
            raise _StopTimeout

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, STOP_TIMEOUT_S)
        try:
            _, status = os.waitpid(self.pid, os.WUNTRACED)
        except ChildProcessError:
            return False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        if not os.WIFSTOPPED(status):
            self._exit_status, self.stopped = status, False
        return True

    def cpu_seconds(self) -> float:
        """CPU time of the candidate process so far, all its threads (nanosecond schedstat; clock ticks
        where schedstat is missing)."""
        try:
            total = 0
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                try:
                    with open(f"/proc/{self.pid}/task/{tid}/schedstat") as handle:
                        total += int(handle.read().split()[0])
                except FileNotFoundError:  # a thread that just ended
                    continue
            return total / 1e9
        except (OSError, IndexError, ValueError):
            pass
        try:
            with open(f"/proc/{self.pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def _alive(self) -> bool:
        """Whether the process still runs, from /proc (waiting for it could take a sampler's ptrace stop)."""
        try:
            with open(f"/proc/{self.pid}/stat") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return False

    def _gone(self) -> str:
        """Why the candidate process stopped answering (waits briefly for it to die, then kills it)."""
        status = self._exit_status
        deadline = time.monotonic() + 1.0
        while status is None and time.monotonic() < deadline:
            pid, raw = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                status = raw
            else:
                time.sleep(0.005)
        if status is None:
            os.kill(self.pid, 9)
            return "the candidate process closed its channel to the evaluator"
        return self._describe_exit(status)

    def send_arena(self, name: str, tensors: dict[str, torch.Tensor], inputs: dict[str, Any],
                   read_only: bool = False) -> Arena:
        """Ship `tensors` in a new shared-memory arena named `name` (replacing an older one of that name);
        `read_only`: sealed so that only this process can write it (`Arena.create`)."""
        if name in self.arenas:
            self.arenas.pop(name).close()
        arena = self.arenas[name] = Arena.create(tensors, read_only=read_only)
        self.request({"op": "arena", "name": name, "arena": arena.describe(), "inputs": inputs}, [arena.fd])
        return arena

    def send_inputs(self, name: str, sets: dict[str, list[Any]], read_only: bool = False) -> dict[str, list[Any]]:
        """Ship input sets; returns each set's arguments as the candidate sees them (views of the arena,
        writable here only, for refills, when `read_only`)."""
        tensors: dict[str, torch.Tensor] = {}
        try:
            encoded = {set_name: encode_value(list(values), tensors, f"{set_name}.") for set_name, values in sets.items()}
        except TypeError as exc:
            raise StageFailed(Status.RUNTIME_ERROR, f"the task's get_inputs(): {exc}") from None
        arena = self.send_arena(name, tensors, encoded, read_only)
        return {set_name: decode_value(args, arena.tensors) for set_name, args in encoded.items()}

    def read_outputs(self, calls: list[int], spot: SpotPlan | None = None) -> list[Any]:
        """The outputs of the given calls of the last request, read from the candidate's memory. With
        `spot`, a flat list of (positions, values, shape) per tensor leaf: runs of elements chosen by the
        plan (small outputs whole); else the whole output structure."""
        described = self.describe(calls)
        if spot:
            return [self.read_spot(leaves, spot) for leaves in described]
        return [self._rebuild(desc) for desc in described]

    def describe(self, calls: list[int], leaves: bool = False) -> list[Any]:
        """How the last call's reply describes the outputs of the given calls of that request (read while the
        candidate is stopped); with `leaves`, each call's as its flat list of tensor leaves (anything else
        there cannot be checked)."""
        if not self.stopped:
            if self._exit_status is not None:
                raise StageFailed(Status.CRASHED, self._gone())
            raise RuntimeError("outputs are read only while the candidate is stopped after its call")
        if self._checked is None:
            self._checked = check_descriptions(self._outputs, self._calls, self.max_output_bytes)
        described = [self._checked[i] for i in calls]
        return [_leaves(desc) for desc in described] if leaves else described

    def read_spot(self, leaves: list[Any], spot: SpotPlan) -> list[Any]:
        """(positions, values, shape) of each described tensor leaf of one call: runs chosen by `spot`."""
        return [self._read_tensor(d, spot, leaf) for leaf, d in enumerate(leaves)]

    def _rebuild(self, desc: Any) -> Any:
        if not isinstance(desc, dict):
            raise StageFailed(Status.INCORRECT, "the output could not be read")
        if "tensor" in desc:
            return self._read_tensor(desc)[1]
        if "list" in desc:
            return [self._rebuild(d) for d in desc["list"]]
        if "value" in desc:
            return desc["value"]
        return type(str(desc.get("unsupported", "unknown")), (), {})()  # compared as a value of that type name

    def _read_tensor(self, desc: Any, spot: SpotPlan | None = None,
                     leaf: int = 0) -> tuple[torch.Tensor | None, torch.Tensor, list[int]]:
        """(positions or None, values, shape) of one described tensor: whole, or with `spot` random runs of
        elements (outputs up to SMALL_OUTPUT_BYTES whole)."""
        try:
            address, shape, dtype_name, nbytes = desc["tensor"]
            dtype, shape, address, nbytes = dtype_from_name(dtype_name), [int(n) for n in shape], int(address), int(nbytes)
            numel = math.prod(shape)
            if min(shape, default=0) < 0 or nbytes != numel * dtype.itemsize or nbytes > self.max_output_bytes:
                raise ValueError("size does not match shape")
            if not nbytes:
                return None, torch.empty(shape, dtype=dtype), shape
            if spot is None or nbytes <= SMALL_OUTPUT_BYTES:
                values = torch.empty(shape, dtype=dtype)
                read_remote(self.pid, [(address, nbytes)], into=values.data_ptr())
                return None, values, shape
            run = min(SPOT_RUN, numel)
            starts = spot.starts(numel, run, leaf)
            values = torch.empty(len(starts) * run, dtype=dtype)
            read_remote(self.pid, [(address + s * dtype.itemsize, run * dtype.itemsize) for s in starts],
                        into=values.data_ptr())
            positions = (torch.tensor(starts).unsqueeze(1) + torch.arange(run)).reshape(-1)
            return positions, values, shape
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise StageFailed(Status.INCORRECT, f"the candidate's output could not be read: {exc}") from None

    def read_record(self, where: Any, limit: int) -> bytes:
        """The bytes the candidate says lie at `where` ([address, length]) in its memory, at most `limit`
        of them (a record its reply points to, e.g. the proof of work)."""
        try:
            address, length = (int(v) for v in where)
            if not 0 < length <= limit:
                raise ValueError(f"a record of {length} bytes (at most {limit})")
            return read_remote(self.pid, [(address, length)]) or b""
        except (TypeError, ValueError, OSError) as exc:
            raise StageFailed(Status.REJECTED, f"[kernel-proof] the proof record could not be read: {exc}") from None

    def close(self) -> None:
        self.resume()
        for arena in self.arenas.values():
            arena.close()
        self.arenas.clear()

def _leaves(desc: Any) -> list[Any]:
    if isinstance(desc, dict) and "list" in desc:
        return [leaf for d in desc["list"] for leaf in _leaves(d)]
    if isinstance(desc, dict) and "tensor" in desc:
        return [desc]
    raise StageFailed(Status.INCORRECT, "a timed call returned a value the judge cannot check")


STOPPED_STATES = (b"T", b"t", b"Z", b"X", None)  # stopped, in a tracer's stop, or gone


def _wait_threads_stopped(pid: int, deadline: float) -> None:
    """Poll /proc until every thread of `pid` is stopped or gone; _StopTimeout after `deadline`."""
    pending: list[str] | None = None
    while True:
        try:
            tids = os.listdir(f"/proc/{pid}/task") if pending is None else pending
        except FileNotFoundError:
            return
        pending = [tid for tid in tids if _thread_state(pid, tid) not in STOPPED_STATES]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise _StopTimeout
        time.sleep(50e-6)


def _wait_descendants_stopped(pid: int, deadline: float) -> None:
    """Wait until every live descendant of `pid` (its threads' children, recursively) has stopped."""
    frontier, seen = [pid], {pid}
    while frontier:
        parent = frontier.pop()
        for child in _children(parent):
            if child not in seen and len(seen) < 4096:
                seen.add(child)
                _wait_threads_stopped(child, deadline)
                frontier.append(child)


def _wait_orphans_stopped(group: int, deadline: float) -> None:
    """Wait until every process of the candidate's group that re-parented to this process (the judge is a
    child subreaper: an orphan of a double fork comes here, not to the supervisor) and its descendants
    have stopped. setpgid is a no-op under the candidate's seccomp filter, so none leaves the group."""
    judge = os.getpid()
    for child in _children(judge):
        if child != group and _process_group(child) == group:
            _wait_threads_stopped(child, deadline)
            _wait_descendants_stopped(child, deadline)


def _process_group(pid: int) -> int | None:
    stat = _read_proc(f"/proc/{pid}/stat", 4096)
    fields = stat[stat.rfind(b")") + 1 :].split()
    try:
        return int(fields[2])
    except (IndexError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        found.extend(int(c) for c in _read_proc(f"/proc/{pid}/task/{tid}/children", 1 << 16).split())
    return found


def _thread_state(pid: int, tid: str) -> bytes | None:
    stat = _read_proc(f"/proc/{pid}/task/{tid}/stat", 4096)
    fields = stat[stat.rfind(b")") + 1 :].split(None, 1)
    return fields[0] if stat and fields else None


def _read_proc(path: str, limit: int) -> bytes:
    """The start of a /proc file with raw system calls (this is in the timed path); b"" if it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.read(fd, limit)
    except OSError:
        return b""
    finally:
        os.close(fd)


def check_descriptions(outputs: Any, calls: int, max_bytes: int) -> list[Any]:
    """The output descriptions of one call reply, checked before anything is read: one per call, nesting,
    leaf count and total bytes bounded, tensors only plain, contiguous and well-formed, and no memory shared
    by the outputs of two calls. Raises StageFailed."""
    if not isinstance(outputs, list) or len(outputs) != calls:
        raise StageFailed(Status.REJECTED, "[forged-message] the candidate process described the wrong outputs")
    ranges: list[tuple[int, int, int]] = []
    budget = {"leaves": MAX_OUTPUT_LEAVES, "bytes": max_bytes}
    for call, desc in enumerate(outputs):
        _check_description(desc, call, ranges, budget, 0)
    _check_disjoint(ranges)
    return outputs


def _check_description(desc: Any, call: int, ranges: list[tuple[int, int, int]], budget: dict[str, int], depth: int) -> None:
    budget["leaves"] -= 1
    if not isinstance(desc, dict) or depth > MAX_OUTPUT_DEPTH or budget["leaves"] < 0:
        raise StageFailed(Status.REJECTED, "[forged-message] the candidate process described its outputs out of bounds")
    if "subclass" in desc:
        raise StageFailed(Status.REJECTED, (
            f"[output-type] forward returned a {str(desc['subclass'])[:80]}, a subclass of torch.Tensor; return plain "
            "torch.Tensor outputs (a subclass can compute or change its values when it is read)"))
    if "list" in desc:
        if not isinstance(desc["list"], list):
            raise StageFailed(Status.REJECTED, "[forged-message] the candidate process described its outputs out of bounds")
        for d in desc["list"]:
            _check_description(d, call, ranges, budget, depth + 1)
        return
    if "tensor" not in desc:
        return
    try:
        address, shape, name, nbytes = desc["tensor"]
        address, shape, nbytes, dtype = int(address), [int(n) for n in shape], int(nbytes), dtype_from_name(name)
        strides = [int(n) for n in desc.get("strides", _contiguous_strides(shape))]
        valid = (len(shape) <= MAX_OUTPUT_DIMS and len(strides) == len(shape) and min(shape, default=0) >= 0 and 0 <= nbytes <= budget["bytes"]
                 and nbytes == math.prod(shape) * dtype.itemsize and 0 <= address < 2**62)
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise StageFailed(Status.REJECTED, "[forged-message] the candidate process described an output it cannot hold")
    if nbytes and any(n > 1 and a != b for n, a, b in zip(shape, strides, _contiguous_strides(shape), strict=False)):
        raise StageFailed(Status.REJECTED, f"[output-layout] an output was described with strides {strides[:8]}; the "
                          "runner describes outputs as contiguous copies (is the candidate server patched?)")
    budget["bytes"] -= nbytes
    if nbytes:
        ranges.append((address, address + nbytes, call))


def _contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]


def _check_disjoint(ranges: list[tuple[int, int, int]]) -> None:
    """Outputs of different calls of one request must not share memory (within one call they may)."""
    ranges.sort()
    end, owner = -1, -1
    for start, stop, call in ranges:
        if start < end and call != owner:
            first, second = sorted((owner, call))
            raise StageFailed(Status.REJECTED, (
                f"[stale-output] calls {first + 1} and {second + 1} of one timed request returned the same output memory: "
                "the judge keeps every call's output and reads them after the request, so a buffer reused across calls "
                "holds only the last call's result; allocate the output per call (e.g. torch.empty in forward)"))
        if stop > end:
            end, owner = stop, call
