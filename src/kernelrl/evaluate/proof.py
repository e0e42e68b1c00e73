"""Proof of work by replay, for the backends whose kernels the candidate's process runs itself without a
device (the Triton interpreter, the NKI interpreter): nothing that process counts proves that a kernel
made the outputs, so the judge re-runs the recorded kernel work on its own side and checks the answer.

- Triton (`backends.triton_replay`): the first trial is a `proof_call`; the candidate process records the
  launches of that forward and where the input set's tensors, the model's state and the outputs live. The
  judge extracts the `@triton.jit` kernels from the source (AST allowlist) and puts its own copies of the
  inputs and reference weights where the launches read them; a replay server (a fork of the judge made
  before any reference output existed; all descriptors but its socket closed, the slot's uid, undumpable,
  seccomp, rlimits) runs exactly the recorded launches under the interpreter, on the first trial's inputs
  and on the second's, beside the remaining trials; after the last, each must match its reference:
  `[kernel-proof]`. Not on a GPU (triton there is in compiled mode).
- NKI (`nki.verify`): the first trial's instruction traces are replayed by the judge's own interpreter on
  tensors it trusts, every output must be a replayed kernel's output, and the second trial's inputs must
  reproduce the second trial's outputs through the same traces (`alternate`). The cost note is the
  replay's, never the candidate's.

Everything the candidate sends is a claim: sizes, counts and nesting are bounded here, and a lie can only
put trusted data in the wrong place or make the replay disagree.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import resource
import select
import signal
import socket
import time
from typing import TYPE_CHECKING, Any

import torch

from kernelrl.evaluate.candidate_client import StageFailed
from kernelrl.evaluate.compare import compare_outputs
from kernelrl.evaluate.guards import tensors
from kernelrl.evaluate.result import Status
from kernelrl.evaluate.spot_checks import SpotPlan
from kernelrl.evaluate.timing_inputs import to_cpu

if TYPE_CHECKING:
    from kernelrl.evaluate.judge import Judge

MAX_RECORD_BYTES = 16 * 2**20  # a proof record (JSON) larger than this is refused
MAX_KERNEL_CALLS = 4096  # launches / kernel runs in one forward's record
MAX_ARGS = 256  # arguments of one launch
MAX_DIMS = 8
MAX_NAME = 200
REPLAY_SLACK_BYTES = 64 * 2**20  # trusted buffers may exceed the trusted tensors' bytes by 8x plus this
PROOF_TAG = "[kernel-proof]"


def kernel_proof(judge: Judge, ref_model: torch.nn.Module) -> Proof:
    """The proof the judge's correctness stage runs for this evaluation (`Proof`: none)."""
    cfg, backend = judge.config, judge.candidate.backend
    if not cfg.guards:
        return Proof()
    if backend == "triton" and cfg.torch_ops == "reject" and not judge.backend.has_device():
        return TritonProof(judge, ref_model)
    if backend == "nki":
        from kernelrl.nki.interpret import real_sdk_available

        if real_sdk_available():  # the candidate got the Neuron SDK's simulator: no traces, no cost
            judge.result.notes.append("estimated NKI cost: none (the kernels ran in the Neuron SDK's CPU simulator, "
                                      "which gives no cost; no replayed proof of work)")
            return Proof()
        return NkiProof(judge, ref_model)
    return Proof()


class Proof:
    """No proof of work by replay (the cpu and cuda backends have theirs elsewhere, or guards are off)."""

    def message(self, trial: int, name: str) -> dict[str, Any]:
        """The request for one correctness trial."""
        return {"op": "call", "sets": [name], "count": True}

    def check(self, trial: int, reply: dict[str, Any], inputs: list[Any], actual: Any, expected: Any) -> None:
        """After a trial passed: `inputs` the judge's own, `actual` the outputs it read, `expected` the reference's."""

    def finish(self) -> None:
        """After the last trial."""


class _Replayed(Proof):
    def __init__(self, judge: Judge, ref_model: torch.nn.Module) -> None:
        self.judge = judge
        self.state = {k: v.detach().to("cpu") for k, v in ref_model.state_dict().items()}

    def message(self, trial: int, name: str) -> dict[str, Any]:
        return {"op": "proof_call", "set": name} if trial == 0 else super().message(trial, name)

    def record(self, reply: dict[str, Any]) -> dict[str, Any]:
        raw = self.judge.process.read_record(reply.get("proof"), MAX_RECORD_BYTES)
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError, MemoryError) as exc:
            raise _refused(f"the proof record is not JSON: {str(exc)[:200]}") from None
        if not isinstance(record, dict):
            raise _refused("the proof record is not an object")
        return record


def _refused(message: str) -> StageFailed:
    return StageFailed(Status.REJECTED, f"{PROOF_TAG} {message}")


# -- Triton --------------------------------------------------------------------------------------------

class TritonProof(_Replayed):
    """The first trial's launches, replayed by confined children of the judge on the judge's inputs of the
    first trial and, the same launches, of the second: launches that carry the answer in their arguments
    rather than compute it reproduce the first set's answer only."""

    def __init__(self, judge: Judge, ref_model: torch.nn.Module) -> None:
        super().__init__(judge, ref_model)
        self.ref_model = ref_model
        self.server = ReplayServer(judge.config.timeouts.correctness / 2)  # before any reference output exists
        judge.spot = SpotPlan(random.SystemRandom().getrandbits(63))  # the server holds the old plan's seed
        judge.random = random.Random(random.SystemRandom().getrandbits(128))
        judge.input_seed = judge.random.getrandbits(62)  # later draws (the timing sets) are the server's secret too
        self.wanted: list[tuple[list[torch.Tensor], str]] = []

    def check(self, trial: int, reply: dict[str, Any], inputs: list[Any], actual: Any, expected: Any) -> None:
        if trial == 0:
            self._read(self.record(reply), expected)
        if trial <= 1 and hasattr(self, "launches"):
            # Each replay runs beside the remaining trials; finish() collects them.
            label = "" if trial == 0 else " on another input set (the launches carry an answer rather than compute it)"
            self.started = getattr(self, "started", time.perf_counter())
            self.server.submit(self.module_text, self.launches, trusted_buffers(self._placed(inputs)), self.outputs)
            self.wanted.append(([t.cpu() for t in tensors(expected)], label))

    def _read(self, record: dict[str, Any], expected: Any) -> None:
        """Check the record and keep what the replays need (the kernels, launches and placements)."""
        from kernelrl.evaluate.backends.triton_replay import KernelRefused, kernel_module

        try:
            module_text, names = kernel_module(self.judge.candidate.source)
        except (KernelRefused, SyntaxError, RecursionError) as exc:
            raise _refused(f"your @triton.jit kernels cannot be replayed: {exc}; a kernel holds only Triton code") from None
        launches = clean_launches(record.get("launches"), set(names))
        outputs = [clean_spec(_tensor_of(o), "output") for o in _bounded_list(record.get("outputs"), MAX_ARGS, "outputs")]
        if len(outputs) != len(tensors(expected)):
            raise _refused(f"forward returned {len(outputs)} tensors by its own account, expected {len(tensors(expected))}")
        claimed = [clean_spec(_tensor_of(c), "input") for c in _bounded_list(record.get("inputs"), MAX_ARGS, "inputs")]
        state = record.get("state") if isinstance(record.get("state"), dict) else {}
        if len(state) > 4 * MAX_ARGS:
            raise _refused("the proof record names too many state tensors")
        self.state_claims = [(clean_spec(_tensor_of(v), "state"), k) for k, v in state.items() if k in self.state]
        self.input_claims, self.module_text, self.outputs, self.launches = claimed, module_text, outputs, launches
        self.kernel_launches = sum("kernel" in launch for launch in launches)

    def _placed(self, inputs: list[Any]) -> list[tuple[dict[str, Any], torch.Tensor]]:
        """(where the candidate says a trusted tensor lives, the judge's own copy of it): the first trial's
        places, filled with this trial's inputs and the reference weights."""
        placed = list(zip(self.input_claims, tensors(inputs), strict=False))
        return placed + [(spec, self.state[key]) for spec, key in self.state_claims]

    def finish(self) -> None:
        if len(self.wanted) == 1:  # one trial: the second set is drawn here, with no candidate call
            inputs = self.judge.inputs(1)
            self.check(1, {}, to_cpu(inputs), None, self.judge.reference_forward(self.ref_model, inputs))
        wanted, self.wanted = self.wanted, []
        answers = self.server.results()
        for (expected, label), replayed in zip(wanted, answers, strict=True):
            if isinstance(replayed, str):
                raise _refused(f"the judge's replay of your {self.kernel_launches} recorded launch(es){label} failed: {replayed}")
            rtol, atol = self.judge._tolerance()
            outcome = compare_outputs(expected, replayed, rtol, atol)
            if not outcome.ok:
                raise _refused(
                    f"the output is not what your kernels compute: the judge replayed the {self.kernel_launches} launch(es) "
                    f"of your @triton.jit kernels recorded in forward on its own copy of the inputs{label}, and "
                    f"{outcome.message}; compute the whole output in the kernels you launch (not in a grid function, "
                    "NumPy, torch or the launch arguments)")
        if wanted:
            self.judge.result.notes.append(
                f"kernel proof: {self.kernel_launches} Triton launch(es) replayed by the judge on {len(wanted)} input "
                f"set(s) ({(time.perf_counter() - self.started) * 1000:.0f} ms, beside the other trials)")


def _bounded_list(value: Any, limit: int, what: str) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise _refused(f"the proof record's {what} are not a list of at most {limit}")
    return value


def _tensor_of(value: Any) -> Any:
    return value.get("tensor") if isinstance(value, dict) else None


def _int(value: Any, low: int, high: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _refused(f"{what} {str(value)[:40]} is not an int in [{low}, {high}]")
    return value


def clean_spec(spec: Any, what: str) -> dict[str, Any]:
    """A tensor placement from the record, rebuilt from checked fields."""
    from kernelrl.evaluate.backends.triton_replay import _DTYPES

    if not isinstance(spec, dict) or str(spec.get("dtype")) not in _DTYPES:
        raise _refused(f"a recorded {what} tensor is not a tensor of a replayable dtype")
    shape, stride = spec.get("shape"), spec.get("stride")
    if not isinstance(shape, list) or not isinstance(stride, list) or len(shape) != len(stride) or len(shape) > MAX_DIMS:
        raise _refused(f"a recorded {what} tensor has no valid shape and strides")
    return {"storage": _int(spec.get("storage"), 0, 2**64 - 1, "a storage address"),
            "nbytes": _int(spec.get("nbytes"), 0, 2**40, "a storage size"),
            "offset": _int(spec.get("offset"), 0, 2**40, "a storage offset"),
            "shape": [_int(n, 0, 2**40, "a size") for n in shape],
            "stride": [_int(n, 0, 2**40, "a stride") for n in stride], "dtype": str(spec["dtype"])}


def _clean_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= MAX_NAME):
        return value
    raise _refused("a recorded launch argument is neither a tensor nor a number")


def clean_launches(launches: Any, kernels: set[str]) -> list[dict[str, Any]]:
    """The record's launches, each rebuilt from checked fields: a kernel of the source, a grid of one to
    three ints, at most MAX_ARGS named arguments (tensor placements or scalars)."""
    clean = []
    for launch in _bounded_list(launches, MAX_KERNEL_CALLS, "launches"):
        if isinstance(launch, dict) and "data" in launch:
            clean.append(_clean_data(launch))
            continue
        if not isinstance(launch, dict) or launch.get("kernel") not in kernels:
            raise _refused("a recorded launch names no @triton.jit function of the source")
        grid = _bounded_list(launch.get("grid"), 3, "grid")
        args = launch.get("args")
        if not isinstance(args, dict) or len(args) > MAX_ARGS:
            raise _refused("a recorded launch has no argument map")
        cleaned: dict[str, Any] = {}
        for name, arg in args.items():
            if not name.isidentifier() or len(name) > MAX_NAME or not isinstance(arg, dict):
                raise _refused("a recorded launch argument is malformed")
            if "tensor" in arg:
                cleaned[name] = {"tensor": clean_spec(arg["tensor"], "argument")}
            elif "value" in arg:
                cleaned[name] = {"value": _clean_value(arg["value"])}
            else:
                raise _refused(f"argument {name} of {launch['kernel']} is a {str(arg.get('unsupported'))[:40]}, "
                               "not a tensor or a number")
        clean.append({"kernel": launch["kernel"], "grid": [_int(d, 0, 2**31 - 1, "a grid size") for d in grid],
                      "args": cleaned})
    return clean


def _clean_data(entry: dict[str, Any]) -> dict[str, Any]:
    """A recorded data movement (a torch copy or fill between launches), rebuilt from checked fields."""
    out = {"tensor": clean_spec(_tensor_of(entry.get("out")), "copy/fill")}
    if entry["data"] == "copy":
        return {"data": "copy", "out": out, "src": {"tensor": clean_spec(_tensor_of(entry.get("src")), "copy source")}}
    value = entry.get("value")
    if entry["data"] != "fill" or not isinstance(value, bool | int | float) or (isinstance(value, int) and abs(value) >= 2**63):
        raise _refused("a recorded data movement is neither a copy nor a fill with a number")
    return {"data": "fill", "out": out, "value": value}


def trusted_buffers(placed: list[tuple[dict[str, Any], torch.Tensor]]) -> dict[int, torch.Tensor]:
    """Byte buffers, by the candidate's storage address, holding the judge's own tensors where the candidate
    says they live (zeros elsewhere). A placement that does not fit its tensor is skipped (the replay then
    reads zeros there); the buffers together are bounded by the trusted tensors' size."""
    from kernelrl.evaluate.backends.triton_replay import _DTYPES

    budget = REPLAY_SLACK_BYTES + 8 * sum(t.numel() * t.element_size() for _, t in placed)
    buffers: dict[int, torch.Tensor] = {}
    for spec, value in placed:
        dtype = _DTYPES[spec["dtype"]]
        if value.dtype != dtype or list(value.shape) != spec["shape"]:
            continue
        buffer = buffers.get(spec["storage"])
        if buffer is None or buffer.numel() < spec["nbytes"]:
            grown = max(spec["nbytes"], 1)
            budget -= grown - (0 if buffer is None else buffer.numel())
            if budget < 0:
                raise _refused("the recorded storages of the inputs are far larger than the inputs")
            bigger = torch.zeros(grown, dtype=torch.uint8)
            if buffer is not None:
                bigger[: buffer.numel()] = buffer
            buffers[spec["storage"]] = buffer = bigger
        usable = buffer[: buffer.numel() // dtype.itemsize * dtype.itemsize].view(dtype)
        try:
            usable.as_strided(spec["shape"], spec["stride"], spec["offset"]).copy_(value.to("cpu"))
        except RuntimeError:  # outside the storage: not placed
            continue
    return buffers


# -- the confined replay server -----------------------------------------------------------------------

ALIGN = 64


class ReplayServer:
    """A confined fork of the judge that runs `triton_replay.replay` jobs in order. It is forked before the
    judge has computed any reference output, so its memory holds none (its copy of the spot-check plan is
    replaced in the judge right after). A job is three memfds: the job (kernels, launches, output places) as
    JSON, the trusted buffers, and room for the outputs' bytes, which it fills; it answers one JSON line."""

    def __init__(self, timeout_s: float) -> None:
        from kernelrl.evaluate.exchange import Channel

        judge_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.timeout_s = timeout_s
        self.pid = os.fork()
        if self.pid == 0:
            judge_end.close()
            _serve_replays(server_end, timeout_s)
        server_end.close()
        self.channel = Channel(judge_end)
        self.pending: list[tuple[int, list[torch.Tensor], list[int]]] = []
        self.deadline = 0.0

    def submit(self, module_text: str, launches: list[dict[str, Any]], buffers: dict[int, torch.Tensor],
               outputs: list[dict[str, Any]]) -> None:
        """Queue one replay; `results` collects it."""
        from kernelrl.evaluate.backends.triton_replay import _DTYPES

        results = [torch.empty(o["shape"], dtype=_DTYPES[o["dtype"]]) for o in outputs]
        sizes = [t.numel() * t.element_size() for t in results]
        layout, offset = [], 0
        for storage, buffer in buffers.items():
            layout.append([storage, offset, buffer.numel()])
            offset += -(-buffer.numel() // ALIGN) * ALIGN
        job = json.dumps({"module": module_text, "launches": launches, "buffers": layout, "outputs": outputs}).encode()
        job_fd, in_fd, out_fd = (_memfd(n) for n in (len(job), offset, sum(sizes)))
        os.pwrite(job_fd, job, 0)
        for (_, at, _), buffer in zip(layout, buffers.values(), strict=True):
            if buffer.numel():
                os.pwrite(in_fd, memoryview(buffer.contiguous().numpy()), at)
        self.channel.send({"job": len(self.pending)}, [job_fd, in_fd, out_fd])
        os.close(job_fd)
        os.close(in_fd)
        self.deadline = max(self.deadline, time.monotonic() + self.timeout_s)
        self.pending.append((out_fd, results, sizes))

    def results(self) -> list[list[torch.Tensor] | str]:
        """Each queued replay's outputs, or why there are none (waits at most until the deadline); then the
        server is ended."""
        answers: list[list[torch.Tensor] | str] = []
        try:
            for out_fd, results, sizes in self.pending:
                answers.append(self._answer(out_fd, results, sizes))
        finally:
            self.close()
        return answers

    def _answer(self, out_fd: int, results: list[torch.Tensor], sizes: list[int]) -> list[torch.Tensor] | str:
        left = self.deadline - time.monotonic()
        buffered = b"\n" in self.channel.buffer  # an earlier receive may have read this answer too
        if not buffered and (left <= 0 or not select.select([self.channel.sock], [], [], left)[0]):
            return f"it did not finish within {self.timeout_s:.0f} s"
        self.channel.sock.settimeout(max(0.1, self.deadline - time.monotonic()))
        try:
            reply = self.channel.receive()
        except (OSError, ValueError, RecursionError):
            return "the replay process's answer is malformed"
        if reply is None:
            return "the replay process ended without an answer (killed: out of memory or CPU time?)"
        if reply.get("ok") is not True:
            return str(reply.get("error") or "the replay failed")[:600]
        start = 0
        for tensor, size in zip(results, sizes, strict=True):
            if size:
                data = os.pread(out_fd, size, start)
                tensor.view(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            start += size
        return results

    def close(self) -> None:
        for out_fd, _, _ in self.pending:
            os.close(out_fd)
        self.pending = []
        self.channel.sock.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def _memfd(size: int) -> int:
    fd = os.memfd_create("kernelrl-replay", os.MFD_CLOEXEC)
    os.ftruncate(fd, max(size, 1))
    return fd


def _serve_replays(sock: socket.socket, timeout_s: float) -> None:
    """The replay server's loop: confine, then one job per message until the judge closes. Never returns."""
    try:
        _confine_child(sock.fileno(), timeout_s)
        from kernelrl.evaluate.backends.triton_replay import replay
        from kernelrl.evaluate.exchange import Channel

        channel = Channel(sock)
        while channel.receive() is not None:
            fds = [channel.take_fd() for _ in range(3)]
            try:
                reply = _replay_job(replay, *fds)
            except BaseException as exc:  # the candidate's kernels failing on replay is an answer too
                reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
            finally:
                for fd in fds:
                    os.close(fd)
            channel.send(reply)
    finally:
        os._exit(0)


def _replay_job(replay: Any, job_fd: int, in_fd: int, out_fd: int) -> dict[str, Any]:
    job = json.loads(os.pread(job_fd, os.fstat(job_fd).st_size, 0))
    size = os.fstat(in_fd).st_size
    view = mmap.mmap(in_fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = torch.frombuffer(view, dtype=torch.uint8)
    buffers = {int(storage): base[at:at + n] for storage, at, n in job["buffers"]}
    replayed = [t.contiguous().view(-1).view(torch.uint8) for t in replay(job["module"], job["launches"], buffers,
                                                                       job["outputs"])]
    total = sum(t.numel() for t in replayed)
    if total > os.fstat(out_fd).st_size:
        raise ValueError("the replayed outputs do not fit the room the judge made for them")
    if total:  # mapped, not written: the server may write no file (RLIMIT_FSIZE 0)
        out = torch.frombuffer(mmap.mmap(out_fd, total, prot=mmap.PROT_READ | mmap.PROT_WRITE), dtype=torch.uint8)
        torch.cat(replayed, out=out)
    return {"ok": True}


def _confine_child(keep_fd: int, timeout_s: float) -> None:
    """What the candidate process gets, less its channel: no descriptor but `keep_fd`, no files
    written, bounded CPU, the worker slot's uid (under bubblewrap as root), undumpable, the seccomp filter."""
    from kernelrl.evaluate.confine import install_seccomp, make_undumpable
    from kernelrl.evaluate.sandbox import EVAL_UID_BASE, SANDBOX_ENV, drop_capabilities

    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(devnull, target)
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, max(keep_fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    for kind, value in ((resource.RLIMIT_FSIZE, 0), (resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, int(timeout_s) + 1)):
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):
            pass
    if os.geteuid() == 0:
        if os.environ.get(SANDBOX_ENV) == "bwrap":
            uid = EVAL_UID_BASE + int(os.environ.get("KERNELRL_WORKER_SLOT", "0"))
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        else:
            drop_capabilities()
    make_undumpable()
    install_seccomp(os.getpid())
    os.environ["TRITON_INTERPRET"] = "1"  # the replay runs on the CPU, under the interpreter, everywhere
    torch.set_num_threads(1)


# -- NKI -------------------------------------------------------------------------------------------------

class NkiProof(_Replayed):
    """The first trial's traces, replayed by the judge; the second trial's inputs through the same traces."""

    def __init__(self, judge: Judge, ref_model: torch.nn.Module) -> None:
        super().__init__(judge, ref_model)
        self.ref_model = ref_model
        self.first: tuple[list[Any], list[torch.Tensor], list[torch.Tensor]] | None = None
        self.done = False

    def check(self, trial: int, reply: dict[str, Any], inputs: list[Any], actual: Any, expected: Any) -> None:
        if trial == 0:
            traces = _bounded_list(self.record(reply).get("traces"), MAX_KERNEL_CALLS, "traces")
            self.first = (traces, self._known(inputs), tensors(actual))
        elif trial == 1 and self.first is not None:
            self._verify((self._known(inputs), tensors(actual)))

    def finish(self) -> None:
        if not self.done and self.first is not None:  # one trial: a second set, drawn and checked here
            judge, inputs = self.judge, self.judge.inputs(1)
            expected = judge.reference_forward(self.ref_model, inputs)
            judge.process.send_inputs("trial", {"t1": inputs})
            judge.process.request({"op": "call", "sets": ["t1"], "count": True})
            actual = judge.process.read_outputs([0])[0]
            outcome = compare_outputs(to_cpu(expected), actual, *judge._tolerance())
            if not outcome.ok:
                raise _refused(f"forward on another input set: {outcome.message}")
            self._verify((self._known(to_cpu(inputs)), tensors(actual)))

    def _known(self, inputs: list[Any]) -> list[torch.Tensor]:
        return [*tensors(inputs), *self.state.values()]

    def _verify(self, alternate: tuple[list[torch.Tensor], list[torch.Tensor]] | None) -> None:
        from kernelrl.nki.trace import MAX_OPS
        from kernelrl.nki.verify import verify_forward

        assert self.first is not None
        traces, known, outputs = self.first
        self.done = True
        ops = sum(len(t.get("ops") or ()) if isinstance(t, dict) and isinstance(t.get("ops"), list) else 0 for t in traces)
        if ops > 2 * MAX_OPS:
            raise _refused(f"the forward's kernels issued {ops} instructions; at most {2 * MAX_OPS} are replayed")
        usable = [i for i, t in enumerate(known) if _nki_storable(t)]
        pick = lambda values: [values[i] for i in usable]  # noqa: E731
        try:
            verdict = verify_forward(traces, pick(known), outputs,
                                     alternate=(pick(alternate[0]), alternate[1]) if alternate is not None else None)
        except Exception as exc:  # anything a malformed trace trips in the judge's interpreter
            raise _refused(f"the instruction trace could not be replayed: {type(exc).__name__}: {str(exc)[:300]}") from None
        if not verdict.ok:
            problem = verdict.problem if verdict.problem.startswith("[") else f"{PROOF_TAG} {verdict.problem}"
            raise StageFailed(Status.REJECTED, problem)
        self.judge.result.notes.append(nki_cost_note(verdict.cost.to_dict()))


def _nki_storable(value: torch.Tensor) -> bool:
    from kernelrl.nki.interpret import hbm_array

    try:
        hbm_array(value)
    except Exception:
        return False
    return True


def nki_cost_note(cost: dict[str, Any]) -> str:
    """One line of the judge's replayed NKI cost estimate for one forward."""
    engines = ", ".join(f"{k} {v:.2f}" for k, v in (cost.get("estimated_busy_us") or {}).items() if v)
    return (f"estimated NKI cost (the judge's replay of the instruction trace, not wall time): "
            f"{float(cost.get('estimated_total_us', 0.0)):.2f} us per forward ({engines} us), "
            f"bottleneck {cost.get('bottleneck')}")
