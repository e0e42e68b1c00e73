"""The judge's side of the candidate process: requests over the socket, tensors in and out.

`CandidateProcess` sends requests and reads replies (anything malformed is a forged message, a closed
channel a crash), ships inputs and weights in shared-memory arenas, and reads the outputs the candidate
describes straight from its memory (`exchange.read_remote`): whole for correctness, as runs of elements
chosen by a `SpotPlan` after timed calls.
"""

from __future__ import annotations

import math
import os
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
    read_remote,
)
from kernelrl.evaluate.result import Status
from kernelrl.evaluate.spot_checks import SMALL_OUTPUT_BYTES, SPOT_RUN, SpotPlan

CANDIDATE_STATUSES = {"compile_error": Status.COMPILE_ERROR, "runtime_error": Status.RUNTIME_ERROR}


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
        self.max_output_bytes = max_output_bytes  # a described output larger than this is not read
        self.arenas: dict[str, Arena] = {}

    def request(self, message: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
        """Send a request and wait for the reply; a dead or babbling candidate ends the evaluation."""
        try:
            self.channel.send(message, fds)
            reply = self.channel.receive()
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
        return reply

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
        status = None
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

    def send_arena(self, name: str, tensors: dict[str, torch.Tensor], inputs: dict[str, Any]) -> Arena:
        """Ship `tensors` in a new shared-memory arena named `name` (replacing an older one of that name)."""
        if name in self.arenas:
            self.arenas.pop(name).close()
        arena = self.arenas[name] = Arena.create(tensors)
        self.request({"op": "arena", "name": name, "arena": arena.describe(), "inputs": inputs}, [arena.fd])
        return arena

    def send_inputs(self, name: str, sets: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """Ship input sets; returns each set's arguments as the candidate sees them (views of the arena)."""
        tensors: dict[str, torch.Tensor] = {}
        try:
            encoded = {set_name: encode_value(list(values), tensors, f"{set_name}.") for set_name, values in sets.items()}
        except TypeError as exc:
            raise StageFailed(Status.RUNTIME_ERROR, f"the task's get_inputs(): {exc}") from None
        arena = self.send_arena(name, tensors, encoded)
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
        """How the candidate describes the outputs of the given calls of the last request; with `leaves`,
        each call's as its flat list of tensor leaves (anything else there cannot be checked)."""
        described = self.request({"op": "describe", "calls": calls})["outputs"]
        if not isinstance(described, list) or len(described) != len(calls):
            raise StageFailed(Status.REJECTED, "[forged-message] the candidate process described the wrong outputs")
        return [_leaves(desc) for desc in described] if leaves else described

    def read_spot(self, leaves: list[Any], spot: SpotPlan) -> list[Any]:
        """(positions, values, shape) of each described tensor leaf of one call: runs chosen by `spot`."""
        return [self._read_tensor(d, spot) for d in leaves]

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

    def _read_tensor(self, desc: Any, spot: SpotPlan | None = None) -> tuple[torch.Tensor | None, torch.Tensor, list[int]]:
        """(positions or None, values, shape) of one described tensor: whole, or with `spot` random runs of
        elements (outputs up to SMALL_OUTPUT_BYTES whole)."""
        try:
            address, shape, dtype_name, nbytes = desc["tensor"]
            dtype, shape, address, nbytes = dtype_from_name(dtype_name), [int(n) for n in shape], int(address), int(nbytes)
            numel = math.prod(shape)
            if nbytes != numel * dtype.itemsize or nbytes > self.max_output_bytes:
                raise ValueError("size does not match shape")
            if not nbytes:
                return None, torch.empty(shape, dtype=dtype), shape
            if spot is None or nbytes <= SMALL_OUTPUT_BYTES:
                values = torch.empty(shape, dtype=dtype)
                read_remote(self.pid, [(address, nbytes)], into=values.data_ptr())
                return None, values, shape
            run = min(SPOT_RUN, numel)
            starts = spot.starts(shape, numel, run)
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
        for arena in self.arenas.values():
            arena.close()
        self.arenas.clear()

def _leaves(desc: Any) -> list[Any]:
    if isinstance(desc, dict) and "list" in desc:
        return [leaf for d in desc["list"] for leaf in _leaves(d)]
    if isinstance(desc, dict) and "tensor" in desc:
        return [desc]
    raise StageFailed(Status.INCORRECT, "a timed call returned a value the judge cannot check")
