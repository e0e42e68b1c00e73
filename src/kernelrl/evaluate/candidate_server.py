"""The candidate process: the only place candidate code runs. It holds nothing a verdict depends on.

It answers the judge's requests over a Unix socket (`exchange.Channel`): load the candidate module,
build `ModelNew` with the weights the judge sends, run forward on arena inputs and report, in the same
reply, where each output lives in its memory (plain tensors only, made contiguous here). The judge stops
this process when the reply arrives and reads the outputs before it lets it run again. Everything it
says is untrusted: the judge reads the outputs itself, compares them with references it computed
elsewhere, and times the requests with its own clock. The in-process counters reported here (kernel
calls, torch ops, child processes) and the plain-tensor rule are early feedback for a model, never a
security boundary.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
from typing import Any

import torch

from kernelrl.evaluate.exchange import Arena, Channel, decode_value, dtype_name
from kernelrl.evaluate.loading import CANDIDATE_FILE, describe_exception, load_module
from kernelrl.native import CompileError

PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)  # exactly these types; a subclass is not an output


class Runner:
    def __init__(self, channel: Channel, backend: str, device: str, guards: bool) -> None:
        self.channel, self.backend, self.device, self.guards = channel, backend, torch.device(device), guards
        self.tile_errors = _tile_errors(backend)
        self.model_new: type | None = None
        self.model: torch.nn.Module | None = None
        self.arenas: dict[str, Arena] = {}
        self.inputs: dict[str, list[Any]] = {}  # input set name -> forward arguments
        self.kept: list[Any] = []  # outputs of the last call request, alive until the next one
        self.described: list[torch.Tensor] = []  # host copies made for describing device outputs
        self.source = ""

    def serve(self) -> None:
        while True:
            request = self.channel.receive()
            if request is None or request.get("op") == "exit":
                return
            try:
                reply = getattr(self, "op_" + str(request.get("op")))(request)
            except self.tile_errors as exc:  # a tile rule the NKI compiler enforces, found while interpreting
                reply = {"ok": False, "status": "compile_error", "message": str(exc)}
            except CompileError as exc:
                from kernelrl.evaluate.feedback import compile_error_text

                reply = {"ok": False, "status": "compile_error", "message": compile_error_text(exc, self.source)}
            except Exception as exc:
                reply = {"ok": False, "status": "runtime_error", "message": describe_exception(exc)}
            self.channel.send(reply)

    # -- requests -------------------------------------------------------------------------------------

    def op_ping(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    def op_load(self, request: dict[str, Any]) -> dict[str, Any]:
        self.source = request["source"]
        if self.guards:
            from kernelrl.evaluate.guards import LaunchCounter
            from kernelrl.evaluate.kernel_calls import install_extension_counter

            install_extension_counter()
            if self.backend == "triton":
                LaunchCounter.install()
        if self.backend == "cuda" and self.device.type != "cuda":
            from kernelrl.evaluate.inline_cuda import install_compile_only

            install_compile_only()  # no GPU: torch's load_inline compiles the candidate's sources, runs nothing
        shim: Any = contextlib.nullcontext()
        if self.backend == "nki":
            from kernelrl.nki.interpret import nki_modules

            shim = nki_modules()  # `import neuronxcc.nki` resolves to the interpreter (without the SDK)
        try:
            with shim as interpreted:
                module = load_module(self.source, CANDIDATE_FILE, "kernelrl_candidate")
            if self.backend == "nki" and not interpreted:  # the real Neuron SDK: its own CPU simulator
                from kernelrl.nki.sdk import simulate_sdk_kernels

                simulate_sdk_kernels(module)
        except (CompileError, *self.tile_errors):
            raise
        except Exception as exc:  # an import-time failure is the candidate's build failing
            return {"ok": False, "status": "compile_error", "message": describe_exception(exc)}
        model_new = getattr(module, "ModelNew", None)
        if not (isinstance(model_new, type) and issubclass(model_new, torch.nn.Module)):
            return {"ok": False, "status": "compile_error", "message": "ModelNew must be a class deriving from torch.nn.Module"}
        self.model_new = model_new
        return {"ok": True}

    def op_arena(self, request: dict[str, Any]) -> dict[str, Any]:
        name = str(request["name"])
        if name in self.arenas:
            self.arenas.pop(name).close()
        self.arenas[name] = Arena.attach(self.channel.take_fd(), request["arena"])
        for set_name, args in (request.get("inputs") or {}).items():
            values = decode_value(args, self.arenas[name].tensors)
            self.inputs[set_name] = [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]
        return {"ok": True}

    def op_init(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.model_new is not None, "load first"
        tensors = self.arenas[request["arena"]].tensors
        init_inputs = decode_value(request["init_inputs"], tensors)
        torch.manual_seed(int(request["seed"]))
        try:
            model = self.model_new(*init_inputs).to(self.device)
        except Exception as exc:
            return {"ok": False, "status": "runtime_error", "message": (
                "ModelNew(*get_init_inputs()) failed; it must take the same constructor arguments as Model. "
                + describe_exception(exc))}
        state = {k: tensors[v] for k, v in request["state"].items()}
        own = model.state_dict()
        copied = own.keys() == state.keys() and all(own[k].shape == state[k].shape for k in state)
        if copied:
            model.load_state_dict(state)
        if request.get("compile"):
            model = torch.compile(model)
        self.model = model
        return {"ok": True, "state_copied": copied or not state}

    def op_call(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run forward once per listed input set, keeping every output alive; the reply says where each
        call's outputs are (the judge reads them while this process is stopped, before its next request)."""
        assert self.model is not None, "init first"
        model, inputs, synchronize = self.model, self.inputs, self._synchronizer()
        self.kept, self.described = [], []
        if not request.get("count"):
            kept = self.kept
            with torch.no_grad():
                for name in request["sets"]:
                    kept.append(model(*inputs[name]))
                synchronize()
            return {"ok": True, "outputs": self._describe_kept()}
        return self._counted_call(request["sets"])

    def _counted_call(self, sets: list[str]) -> dict[str, Any]:
        """Forward on each set under the in-process counters (feedback, not proof): kernel calls, torch ops,
        child processes; under the NKI interpreter also its estimated cost and the outputs no kernel
        returned (host-side compute)."""
        from kernelrl.evaluate.guards import OpCounter, spawned_processes, tensors
        from kernelrl.evaluate.kernel_calls import kernel_calls_total

        assert self.model is not None
        before = kernel_calls_total()
        counter = OpCounter() if self.guards else contextlib.nullcontext()
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            stack.enter_context(counter)
            if self.backend == "nki":
                from kernelrl.nki.interpret import collect_costs, collect_outputs

                cost, made = stack.enter_context(collect_costs()), stack.enter_context(collect_outputs())
            for name in sets:
                self.kept.append(self.model(*self.inputs[name]))
            self._synchronizer()()
        reply = {"ok": True, "kernel_calls": kernel_calls_total() - before,
                 "torch_ops": dict(counter.compute) if self.guards else {},
                 "processes": spawned_processes() if self.guards else 0, "outputs": self._describe_kept()}
        if self.backend == "nki":
            produced = {t.untyped_storage().data_ptr() for t in made}
            returned = [t for out in self.kept for t in tensors(out)]
            reply |= {"kernel_calls": cost.kernels, "nki_cost": {**cost.to_dict(), "forwards": len(sets)},
                      "foreign_outputs": sum(t.untyped_storage().data_ptr() not in produced for t in returned)}
        return reply

    def op_proof_call(self, request: dict[str, Any]) -> dict[str, Any]:
        """The counted call on one input set, recording what the judge replays as the proof of work
        (`evaluate.proof`): the Triton launches, or the NKI instruction traces. The record is kept here as
        JSON bytes; the reply says where (`proof`: address, length) and the judge reads it from this
        process's memory. A claim, like every reply: a lie only makes the replay disagree."""
        name = str(request["set"])
        if self.backend == "triton":
            from kernelrl.evaluate.backends.triton_replay import DataLog, LaunchLog

            LaunchLog.install()
            LaunchLog.take()
            LaunchLog.recording = True
            try:
                with DataLog():
                    reply = self.op_call({"sets": [name], "count": True})
            finally:
                LaunchLog.recording = False
            record: dict[str, Any] = {"launches": LaunchLog.take(), **self._triton_placements(name)}
        else:
            from kernelrl.nki.interpret import collect_traces

            with collect_traces() as traces:
                reply = self.op_call({"sets": [name], "count": True})
            record = {"traces": traces}
        self.proof_record = bytearray(json.dumps(record).encode())
        buffer = (ctypes.c_char * len(self.proof_record)).from_buffer(self.proof_record)
        return {**reply, "proof": [ctypes.addressof(buffer), len(self.proof_record)]}

    def _triton_placements(self, name: str) -> dict[str, Any]:
        """Where the input set's tensors, the model's state and the call's outputs live (storages), so the
        judge can put its own copies of the trusted ones where the recorded launches read them."""
        from kernelrl.evaluate.backends.triton_replay import describe_argument
        from kernelrl.evaluate.guards import tensors

        assert self.model is not None
        return {"inputs": [describe_argument(t) for t in tensors(self.inputs[name])],
                "state": {k: describe_argument(v) for k, v in self.model.state_dict().items()},
                "outputs": [describe_argument(t) for t in tensors(self.kept[0] if self.kept else None)]}

    def op_launched_kernels(self, request: dict[str, Any]) -> dict[str, Any]:
        """Names of the GPU kernels one forward launches, from torch's profiler (feedback only)."""
        from kernelrl.evaluate.guards import profiled_cuda_kernels

        assert self.model is not None
        model, args = self.model, self.inputs[request["set"]]
        with torch.no_grad():
            return {"ok": True, "kernels": profiled_cuda_kernels(lambda: model(*args))}

    def op_counters(self, request: dict[str, Any]) -> dict[str, Any]:
        from kernelrl.evaluate.guards import LaunchCounter
        from kernelrl.native import call_counts

        return {"ok": True, "kernel_calls": {**call_counts(), **LaunchCounter.launches}}

    # -- helpers --------------------------------------------------------------------------------------

    def _describe_kept(self) -> list[Any]:
        """Where the outputs of the calls just made live (contiguous host copies made here, inside the call)."""
        return [self._describe(out) for out in self.kept]

    def _describe(self, value: Any) -> Any:
        """Tensors as (address, shape, dtype, bytes) and strides, other values as JSON. Only plain tensors are
        outputs: a subclass is named and left untouched (its methods could compute or change its values)."""
        if type(value) in PLAIN_TENSOR_TYPES:
            t = value.detach()
            if t.device.type != "cpu" or not t.is_contiguous():
                t = t.to("cpu").contiguous()
                self.described.append(t)
            return {"tensor": [t.data_ptr(), list(t.shape), dtype_name(t.dtype), t.numel() * t.element_size()],
                    "strides": list(t.stride())}
        if isinstance(value, torch.Tensor):
            return {"subclass": type(value).__qualname__}
        if isinstance(value, list | tuple):
            return {"list": [self._describe(v) for v in value]}
        if isinstance(value, bool | int | float) or value is None:
            return {"value": value}
        return {"unsupported": type(value).__name__}

    def _synchronizer(self) -> Any:
        if self.device.type == "cuda":
            return lambda: torch.cuda.synchronize(self.device)
        return lambda: None


def _tile_errors(backend: str) -> tuple[type[BaseException], ...]:
    """The NKI interpreter's compile error for the nki backend (imported only there), else nothing."""
    if backend != "nki":
        return ()
    from kernelrl.nki.rules import NkiCompileError

    return (NkiCompileError,)


def serve_candidate(sock_fd: int, backend: str, device: str, guards: bool) -> None:
    """Entry of the candidate process after it confined itself; returns when the judge is done."""
    import socket

    channel = Channel(socket.socket(fileno=sock_fd))
    Runner(channel, backend, device, guards).serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
