"""The judge: the trusted half of one evaluation. It never imports or runs candidate code.

The judge owns the task's reference (built and run here), the inputs, the expected outputs, the
comparison, the clock and the verdict. The candidate runs in a separate process (`evaluate.candidate_server`),
forked before the judge computed anything, confined (seccomp, its own uid as root, CPUs set from
outside) and driven over a socket: inputs reach it through shared memory (`exchange.Arena`), and the
judge reads each output from the candidate's memory right after the call returns (`read_remote`).

Stages: static -> build -> init -> correctness -> timing. `Judge.run` never raises for anything the
candidate does: a failure becomes a status and a message in the returned `EvalResult`.

Inputs: every input of an evaluation is drawn under a seed the judge takes from the OS (`inputs`), so no
answer can be looked up from the task's seed. Timing: the judge times requests of k forward calls (k chosen
so that one socket round trip is under 1% of a request), each call on an input set drawn at random from a
few sets whose outputs the judge knows (sets that differ in a few elements at secret scattered positions),
and reads part of every call's output right after the request returns, the positions where the sets'
answers differ always among them: a cached, partial or deferred answer is wrong somewhere it looks. The timed calls are
profiled from outside for the coverage (`evaluate.coverage`). The reference is
timed the same way, in a process of its own (the supervisor's reference job), so both sides pay the
same request overhead.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import math
import platform
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch

from kernelrl.evaluate.backends import Backend, get_backend
from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.candidate_client import CandidateProcess, StageFailed
from kernelrl.evaluate.compare import compare_outputs
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.coverage import PROFILE_MAX_S, coverage_failure, coverage_record, profile_settled
from kernelrl.evaluate.exchange import encode_value
from kernelrl.evaluate.feedback import build_feedback
from kernelrl.evaluate.guards import (
    count_flops,
    declared_cuda_kernels,
    device_ceilings,
    io_bytes,
    launched_own_kernel,
    mutated,
    roofline_ms,
)
from kernelrl.evaluate.loading import CANDIDATE_FILE, TASK_FILE, load_module
from kernelrl.evaluate.perf_sampler import sampling_method
from kernelrl.evaluate.proof import Proof, kernel_proof
from kernelrl.evaluate.result import Correctness, EvalResult, StageReport, Status, Timing
from kernelrl.evaluate.spot_checks import SpotPlan, differing_positions, read_spots
from kernelrl.evaluate.static import run_static_checks
from kernelrl.evaluate.timing_inputs import (
    MAX_SLOTS,
    InputSlots,
    Measurement,
    scatter_elements,
    summarise,
    to_cpu,
)
from kernelrl.tasks.task import Task

Announce = Callable[[str, float], None]

# One round trip is at most this share of a timed request. It also bounds what a candidate gains by replying
# before its work is done: work still running after the reply must end before the judge stops the process
# (about a round trip later), or the spot checks read unfinished outputs (`test_described_outputs`).
REQUEST_OVERHEAD_SHARE = 0.01
MIN_REQUEST_MS = 2.0
KEPT_OUTPUT_BYTES = 64 * 2**20  # outputs of one timed request the candidate keeps alive for checking
MAX_CALLS_PER_REQUEST = MAX_SLOTS  # a request never repeats a slot
SAMPLING_HZ = {"perf": 2000.0, "ptrace": 1000.0}  # timed calls: perf costs ~nothing; ptrace stops threads
# Untimed extra profile: the sampler's cost no longer matters. A 50 us period also sees threads that live
# for less than the timed calls' period (perf's period restarts in each new thread: a thread that runs
# for less than one period is never sampled).
PROFILE_MORE_HZ = {"perf": 20000.0, "ptrace": 4000.0}
PROFILE_LOOK_S = 0.002  # how often an untimed extra profile asks whether it has settled
CHECKED_CALLS = 16  # calls per timed request whose outputs are spot-checked (the last always, the others at random)
SHARED_TRIALS_BYTES = 16 * 2**20  # correctness trials whose inputs together are this small share one arena
MIN_CHECKED_CALLS = 32  # checked calls per measurement: more requests when k is small (within the timing budget)


class Judge:
    def __init__(self, task: Task, candidate: Candidate, config: EvalConfig, announce: Announce,
                 process: CandidateProcess, own_objects: tuple[str, ...] | None = None) -> None:
        """`own_objects`: path prefixes of the candidate's own built code; with them, the timed calls are
        profiled from here (instruction-pointer samples) for the time-based coverage."""
        self.task, self.candidate, self.config, self.announce = task, candidate, config, announce
        self.process, self.own_objects = process, own_objects
        self.backend: Backend = get_backend(candidate.backend)
        self.device = self.backend.device(config.device_index)
        self.random = random.Random(random.SystemRandom().getrandbits(128))  # seeded from the OS: unknown to the candidate
        self.spot = SpotPlan(self.random.getrandbits(63))  # which elements of timed outputs to read
        self.input_seed = self.random.getrandbits(62)  # every input of this evaluation is drawn from it
        self.result = EvalResult(
            status=Status.OK, task_id=task.id, backend=candidate.backend, device=str(self.device),
            size_overrides={k: list(v) for k, v in task.size_overrides.items()}, notes=list(self.backend.notes()),
        )

    @contextlib.contextmanager
    def stage(self, name: str, timeout: float) -> Iterator[None]:
        self.announce(name, timeout)
        start, cpu_start, child_start = time.perf_counter(), time.process_time(), self.process.cpu_seconds()
        report = StageReport(name=name, status="ok", duration_s=0.0)
        self.result.stages.append(report)
        try:
            yield
        except StageFailed as failure:
            report.status, report.message = "failed", failure.message
            raise
        finally:
            report.duration_s = time.perf_counter() - start
            report.cpu_s = time.process_time() - cpu_start + self.process.cpu_seconds() - child_start

    # -- stages ---------------------------------------------------------------------------------------

    def static(self) -> None:
        try:
            tree = ast.parse(self.candidate.source, filename=CANDIDATE_FILE)
        except SyntaxError as exc:
            raise StageFailed(Status.COMPILE_ERROR, f"SyntaxError: {exc.msg} ({CANDIDATE_FILE} line {exc.lineno})") from None
        findings = run_static_checks(tree, self.candidate.source, self.backend, self.config.static_severity)
        self.result.static_findings = [f.to_dict() for f in findings]
        rejects = [f for f in findings if f.severity == "reject"]
        if any(f.check == "defines-model-new" for f in rejects):
            raise StageFailed(Status.COMPILE_ERROR, "the candidate must define `class ModelNew(nn.Module)`")
        if rejects:
            raise StageFailed(Status.REJECTED, "; ".join(f"[{f.check}] {f.message}" for f in rejects))

    def build(self) -> None:
        try:
            self.reference = load_module(self.task.source, TASK_FILE, "kernelrl_reference")
        except Exception as exc:  # the task itself is broken: not the candidate's fault, but no verdict
            raise task_failure("the task failed to load", exc) from None
        self.process.request({"op": "load", "source": self.candidate.source})

    def init(self, compile_candidate: bool = False) -> torch.nn.Module:
        seed = self.task.seed + self.config.seed
        seed_torch(seed)
        try:
            init_inputs = self.reference.get_init_inputs()
        except Exception as exc:
            raise task_failure("the task's get_init_inputs() failed", exc) from None
        try:
            seed_torch(seed)
            ref_model = self.reference.Model(*init_inputs).to(self.device)
        except Exception as exc:
            raise task_failure("the task's Model(*get_init_inputs()) failed", exc) from None
        tensors: dict[str, torch.Tensor] = {}
        try:
            encoded = encode_value(list(init_inputs), tensors, "init")
        except TypeError as exc:
            raise StageFailed(Status.RUNTIME_ERROR, f"the task's get_init_inputs(): {exc}") from None
        state = {f"w{i}": (k, v) for i, (k, v) in enumerate(ref_model.state_dict().items())}
        tensors.update({name: v for name, (_, v) in state.items()})
        self.process.send_arena("init", tensors, {})
        reply = self.process.request({"op": "init", "arena": "init", "init_inputs": encoded, "seed": seed,
                                      "state": {k: name for name, (k, _) in state.items()}, "compile": compile_candidate})
        if not reply.get("state_copied", True):
            self.result.notes.append("state dicts differ: reference weights were not copied into ModelNew")
        return ref_model

    def inputs(self, draw: int) -> list[Any]:
        """Draw number `draw` of the task's `get_inputs()`, under a seed made from the OS for this evaluation
        alone: neither the task's seed nor anything else the candidate knows predicts it."""
        seed_torch(self.input_seed + draw)
        try:
            inputs = self.reference.get_inputs()
            return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]
        except Exception as exc:
            raise task_failure("the task's get_inputs() failed", exc) from None

    def reference_forward(self, ref_model: torch.nn.Module, inputs: list[Any]) -> Any:
        """The task's forward on a copy of `inputs`; its failure is the task's (StageFailed)."""
        try:
            return ref_model(*_clone(inputs))
        except Exception as exc:
            raise task_failure("the task's Model.forward failed", exc) from None

    def correctness(self, ref_model: torch.nn.Module) -> None:
        """Fresh inputs per trial; the reference runs here, the candidate there; outputs read whole. The first
        trial runs alone (the clearest failure, and an answer wrong on it costs no further draws); small trials
        after it are drawn once it passed, and share one arena and one request."""
        rtol, atol = self._tolerance()
        trials = self.config.correctness_trials
        detail = Correctness(trials=trials, passed=0, rtol=rtol, atol=atol)
        self.result.correctness = detail
        torch_ops: dict[str, int] = {}
        made = {"t0": self.inputs(0)}
        proof = kernel_proof(self, ref_model)  # replayed proof of work (triton, nki): evaluate.proof
        batched = trials * _input_bytes(made["t0"]) <= SHARED_TRIALS_BYTES
        if batched:
            shared = self.process.send_inputs("trial", made)
            self._run_trials([0], made, shared, ref_model, torch_ops, proof)
            if trials > 1:
                rest = {f"t{trial}": self.inputs(trial) for trial in range(1, trials)}
                made |= rest
                shared |= self.process.send_inputs("trials", rest)
                self._run_trials(list(range(1, trials)), made, shared, ref_model, torch_ops, proof)
        else:
            for trial in range(trials):
                inputs = made.pop(f"t{trial}") if trial == 0 else self.inputs(trial)
                shared = self.process.send_inputs("trial", {f"t{trial}": inputs})
                self._run_trials([trial], {f"t{trial}": inputs}, shared, ref_model, torch_ops, proof)
        proof.finish()
        self.result.kernel_calls = {str(k): int(v) for k, v in self.process.request({"op": "counters"})["kernel_calls"].items()}
        if self.config.guards and self.candidate.backend == "cuda" and self.device.type == "cuda":
            self._check_cuda_kernels_ran()
        self.result.torch_ops = dict(torch_ops)
        if torch_ops:
            self.result.notes.append("torch compute ops in forward: " + ", ".join(f"{k}x{v}" for k, v in torch_ops.items()))

    def _run_trials(self, trials: list[int], made: dict[str, list[Any]], shared: dict[str, list[Any]],
                    ref_model: torch.nn.Module, torch_ops: dict[str, int], proof: Proof) -> None:
        """One request that runs forward on each listed trial's inputs; each output read whole and compared
        with the reference's, in order (the first wrong one fails the stage)."""
        rtol, atol = self._tolerance()
        detail = self.result.correctness
        assert detail is not None
        names = [f"t{trial}" for trial in trials]
        self.trial_set = names[0]
        expected = [self.reference_forward(ref_model, made[name]) for name in names]
        try:
            message = proof.message(trials[0], names[0]) if len(names) == 1 else {"op": "call", "sets": names, "count": True}
            reply = self.process.request(message)
        except StageFailed as failure:
            detail.failing_trial = trials[0]
            if failure.status == Status.RUNTIME_ERROR:
                failure.message = "\n".join([failure.message, *self.backend.interpreter_hints(self.candidate.source)])
            raise
        outputs = self.process.read_outputs(list(range(len(names))))
        if self.config.guards:
            self._check_feedback_counters(reply, torch_ops)
            for trial, name in zip(trials, names, strict=True):
                if trial <= 1 and mutated(to_cpu(made[name]), shared[name]):  # the timed calls are checked as a whole
                    raise StageFailed(Status.REJECTED, "[input-mutation] the candidate modified its inputs; write results to new tensors")
        for trial, want, actual in zip(trials, expected, outputs, strict=True):
            outcome = compare_outputs(to_cpu(want), actual, rtol, atol)
            detail.max_abs_error = max(detail.max_abs_error, outcome.max_abs_error)
            detail.max_rel_error = max(detail.max_rel_error, outcome.max_rel_error)
            if not outcome.ok:
                detail.failing_trial, detail.message = trial, outcome.message
                raise StageFailed(Status.INCORRECT, f"trial {trial + 1}/{detail.trials}: {outcome.message}")
            proof.check(trial, reply, to_cpu(made[f"t{trial}"]), actual, want)
            detail.passed += 1

    def _check_cuda_kernels_ran(self) -> None:
        """One more forward under the profiler (in the candidate's process, so feedback rather than proof):
        a kernel the candidate defines must be among those launched."""
        declared = declared_cuda_kernels(self.candidate.source)
        if not declared:
            self.result.notes.append("no __global__ function found in the source: kernel names not checked")
            return
        launched = [str(k) for k in self.process.request({"op": "launched_kernels", "set": self.trial_set})["kernels"]]
        if not launched_own_kernel(declared, launched):
            seen = ", ".join(sorted(set(launched))[:5]) or "no kernels"
            raise StageFailed(
                Status.REJECTED,
                f"[kernel-not-launched] none of your kernels ({', '.join(sorted(declared))}) ran on the GPU during "
                f"forward; the profiler saw {seen}. Launch your own kernel to compute the output",
            )

    def _check_feedback_counters(self, reply: dict[str, Any], torch_ops: dict[str, int]) -> None:
        """The candidate process's own counters: early, specific feedback (they can be silenced by the
        candidate, so they only ever reject; the proof of work is the judge's profile)."""
        if reply.get("processes"):
            raise StageFailed(Status.REJECTED, "[processes] forward started processes; a kernel only computes")
        must_call = self.candidate.backend == "nki" or (self.backend.has_device() and self.candidate.backend in ("cpu", "triton"))
        if must_call and not reply.get("kernel_calls"):
            raise StageFailed(
                Status.REJECTED,
                f"[kernel-not-called] forward made no call to a {self.candidate.backend} kernel; {self.backend.kernel_hint()}",
            )
        if reply.get("foreign_outputs"):
            raise StageFailed(
                Status.REJECTED,
                f"[host-compute] {reply['foreign_outputs']} output(s) of forward did not come from an NKI kernel (computed "
                "on the host); return the HBM tensor your kernel stores its result into",
            )
        ops = {str(k): int(v) for k, v in (reply.get("torch_ops") or {}).items()}
        for name, count in ops.items():
            torch_ops[name] = torch_ops.get(name, 0) + count
        if ops and self.config.torch_ops == "reject":
            listed = ", ".join(f"{k} ({v}x)" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:6])
            raise StageFailed(
                Status.REJECTED,
                f"[torch-ops] forward computed with PyTorch operators ({listed}); do the computation in your kernel "
                "(allocating outputs and reshaping views is fine)",
            )

    def timing(self, ref_model: torch.nn.Module, cached: dict | None) -> None:
        cfg = self.config
        timing = Timing(meaningful=True, method=self.backend.timing_method(cfg.num_threads) + ", judged from another process")
        self.result.timing = timing
        sets, expected, scattered = self._timing_sets(ref_model)
        self.spot.differ = differing_positions(list(expected.values()))
        self.slots = InputSlots(self.process, sets, self.random, on_device=self.device.type != "cpu", scattered=scattered)
        try:
            candidate = self._measure(expected)
        except StageFailed as failure:
            if failure.status == Status.CRASHED:
                failure.message += (" (timed calls get their inputs in read-only memory: a kernel that writes to its "
                                    "inputs faults there [input-mutation]; write results to new tensors)")
            raise
        self._check_coverage()
        if cached:
            timing.reference_ms, timing.reference_spread_ms = cached["reference_ms"], cached["reference_spread_ms"]
            timing.compiled_reference_ms = cached.get("compiled_reference_ms")
            if cached.get("compiled_reference_note"):
                self.result.notes.append(cached["compiled_reference_note"])
            timing.reference_cached = True
        else:
            self.result.notes.append("no reference timing was available: speedup not computed")
        if timing.reference_ms is not None:
            speedup = timing.reference_ms / max(candidate.median_ms, 1e-9)
            if cfg.guards and speedup > cfg.suspicious_speedup:
                candidate = self._check_plausible(ref_model, sets, expected, candidate)
                self.result.notes.append(f"speedup {speedup:.1f}x was re-measured and checked against the roofline")
        timing.candidate_ms, timing.candidate_spread_ms, timing.trials = candidate.median_ms, candidate.spread_ms, candidate.trials
        if timing.reference_ms is not None:
            timing.speedup = timing.reference_ms / max(timing.candidate_ms, 1e-9)
        if timing.compiled_reference_ms:
            timing.speedup_vs_compiled = timing.compiled_reference_ms / max(timing.candidate_ms, 1e-9)

    def _timing_sets(self, ref_model: torch.nn.Module) -> tuple[dict[str, list[Any]], dict[str, list[torch.Tensor]],
                                                                 dict[str, list[torch.Tensor | None]] | None]:
        """The timing input sets, their expected outputs and, per set and input, the flat positions where it
        differs from the first (`scatter_elements`). A task whose inputs have structure that element swaps
        break (the reference's output is then no longer finite where the first set's is) gets independent
        draws instead, and no positions."""
        cfg = self.config
        base = self.inputs(cfg.correctness_trials)
        # The first set is the base itself: every other set differs from it in its own positions only.
        sets, scattered = {"s0": base}, {"s0": [_NO_POSITIONS if isinstance(x, torch.Tensor) else None for x in base]}
        expected = {"s0": _flat_tensors(to_cpu(self.reference_forward(ref_model, base)))}
        finite = [_finite_mask(t) for t in expected["s0"]]
        other = self.inputs(cfg.correctness_trials + 1) if cfg.timing_input_sets > 1 else base  # each set takes its own positions of it
        for i in range(1, cfg.timing_input_sets):
            mixed, positions = scatter_elements(base, other, self.spot.generator)
            outputs = _flat_tensors(to_cpu(self.reference_forward(ref_model, mixed)))
            if any(not _finite_where(o, f) for f, o in zip(finite, outputs, strict=False)):
                return self._independent_sets(ref_model)
            sets[f"s{i}"], scattered[f"s{i}"], expected[f"s{i}"] = mixed, positions, outputs
        return sets, expected, scattered

    def _independent_sets(self, ref_model: torch.nn.Module) -> tuple[dict[str, list[Any]], dict[str, list[torch.Tensor]], None]:
        draws = {f"s{i}": self.inputs(self.config.correctness_trials + i) for i in range(self.config.timing_input_sets)}
        return draws, {name: _flat_tensors(to_cpu(self.reference_forward(ref_model, x))) for name, x in draws.items()}, None

    def _measure(self, expected: dict[str, list[torch.Tensor]]) -> Measurement:
        """Median per-call time over timed requests of k calls, each on its own input slot (a copy of one
        of the timing sets; slots are refilled with other sets between requests); after each request the
        outputs of a few random calls (and the last) are spot-checked."""
        cfg, slots = self.config, self.slots
        slots.grow(max(1, cfg.warmup))
        warm_order = slots.order(max(1, cfg.warmup))
        warm_ms = self._timed_request(warm_order)[0]
        slots.refill(warm_order)
        round_trip = min(self._timed_request([])[0] for _ in range(3))
        call_ms = max((warm_ms - round_trip) / max(1, cfg.warmup), 1e-4)
        out_bytes = max(1, sum(t.numel() * t.element_size() for t in next(iter(expected.values()))))
        k = math.ceil(max(MIN_REQUEST_MS, round_trip / REQUEST_OVERHEAD_SHARE) / call_ms)
        k = max(1, min(k, MAX_CALLS_PER_REQUEST, KEPT_OUTPUT_BYTES // out_bytes, slots.capacity))
        slots.grow(k + 1)  # one spare: the set then changes from call to call across requests too
        # About `timing_trials` calls in all (at least 5 requests), within the time budget.
        # A candidate that makes its first calls slow gets k = 1; it still meets MIN_CHECKED_CALLS checks.
        wanted = max(math.ceil(cfg.timing_trials / k), math.ceil(MIN_CHECKED_CALLS / min(k, CHECKED_CALLS)))
        requests = max(5, min(wanted, int(cfg.timing_budget_s * 1000 / max(k * call_ms, 1e-3))))
        samples: list[float] = []
        sampler, profile_start, cpu_start = self._start_sampler(SAMPLING_HZ[sampling_method() or "ptrace"]), time.perf_counter(), self.process.cpu_seconds()
        try:
            for _ in range(requests):
                order = slots.order(k)
                elapsed, _ = self._timed_request(order)
                samples.append(elapsed / k)
                self.result.costs["timed_calls"] = self.result.costs.get("timed_calls", 0.0) + elapsed / 1000
                self._check_request(order, expected)
                slots.refill(order)
        finally:
            if sampler is not None:
                self._record_coverage(self._stop_sampler(sampler), time.perf_counter() - profile_start, self.process.cpu_seconds() - cpu_start)
        enforced = sampler is not None and cfg.guards and cfg.torch_ops == "reject"  # else the timed calls' profile is all
        if enforced and (not profile_settled(self.result.coverage, cfg.min_coverage)
                         or coverage_failure(self.result.coverage, cfg.min_coverage)):  # a rejection stands on the finer profile
            self._profile_more(k, expected)
        self.result.notes.append(f"timed {requests} requests of {k} calls (round trip {round_trip * 1000:.0f} us)")
        return summarise(samples)

    def _check_request(self, order: list[str], expected: dict[str, list[torch.Tensor]]) -> None:
        """Spot-check the outputs of the last call and of CHECKED_CALLS - 1 random others."""
        k = len(order)
        checked = sorted({k - 1, *self.random.sample(range(k), min(CHECKED_CALLS - 1, k))})
        self._check_calls(checked, [expected[self.slots.content[order[call]]] for call in checked])

    def _check_calls(self, calls: list[int], wants: list[list[torch.Tensor]]) -> None:
        """Spot-check the outputs of the given calls of the last request (`wants`: each one's expected
        outputs): read and compared all at once, or call by call where something is irregular (a wrong
        shape, dtype or count of outputs, an unreadable one), which says what."""
        process = self.process
        described = process.describe(calls, leaves=True)
        batch = read_spots(process.pid, described, wants, self.spot, process.max_output_bytes)
        if batch is None:
            for outputs, want in zip([process.read_spot(leaves, self.spot) for leaves in described], wants, strict=True):
                self._spot_check(outputs, want)
            return
        rtol, atol = self._tolerance()
        for leaf in batch:
            outcome = compare_outputs(leaf.expected, leaf.values, rtol, atol)
            if not outcome.ok:  # the first wrong call says how
                wrong = (compare_outputs(leaf.expected[i], leaf.values[i], rtol, atol) for i in range(len(calls)))
                _stale_output(next((o for o in wrong if not o.ok), outcome).message)

    def _start_sampler(self, hz: float) -> Any:
        if self.own_objects is None:
            return None
        from kernelrl.evaluate.perf_sampler import start_sampler
        from kernelrl.evaluate.sampler import PcSampler

        sampler = start_sampler(self.process.pid, hz)
        if isinstance(sampler, PcSampler):  # its ptrace stops are held while the candidate is stopped
            self.process.tracer = sampler
        return sampler

    def _stop_sampler(self, sampler: Any) -> Any:
        self.process.tracer = None
        return sampler.stop()

    def _record_coverage(self, samples: Any, seconds: float, cpu_seconds: float) -> None:
        if samples.error:
            self.result.notes.append(f"coverage not measured: {samples.error}")
            return
        self.result.coverage = coverage_record(samples, self.own_objects or (), seconds, cpu_seconds)

    def _check_coverage(self) -> None:
        """Proof of work from outside the candidate's address space: with torch ops forbidden, the
        forward's compute time must not be (almost) all in fallback code."""
        cfg = self.config
        message = coverage_failure(self.result.coverage, cfg.min_coverage) if cfg.guards and cfg.torch_ops == "reject" else None
        if message:
            raise StageFailed(Status.REJECTED, message)

    def _profile_more(self, k: int, expected: dict[str, list[torch.Tensor]]) -> None:
        """Profile untimed requests at a higher rate (the last call of each checked) until the profile is
        settled or PROFILE_MAX_S, and let that profile stand instead of the timed calls' one."""
        sampler = self._start_sampler(PROFILE_MORE_HZ[sampling_method() or "ptrace"])
        start, cpu_start = time.perf_counter(), self.process.cpu_seconds()
        next_look = start + PROFILE_LOOK_S
        try:
            while (now := time.perf_counter()) < start + PROFILE_MAX_S:
                if now >= next_look:
                    next_look = now + PROFILE_LOOK_S
                    snapshot = sampler.snapshot()
                    if snapshot.error:  # recorded once, by the final stop() below
                        break
                    self._record_coverage(snapshot, now - start, self.process.cpu_seconds() - cpu_start)
                    if profile_settled(self.result.coverage, self.config.min_coverage):
                        break
                order = self.slots.order(k)
                self._timed_request(order)
                self._check_calls([k - 1], [expected[self.slots.content[order[-1]]]])
                self.slots.refill(order)
        finally:
            self._record_coverage(self._stop_sampler(sampler), time.perf_counter() - start, self.process.cpu_seconds() - cpu_start)
            self.result.costs["profile_settling"] = time.perf_counter() - start

    def _timed_request(self, order: list[str]) -> tuple[float, dict[str, Any]]:
        """Milliseconds of one request, on the judge's clock (empty order: a round trip)."""
        message = {"op": "call", "sets": order} if order else {"op": "ping"}
        start = time.perf_counter_ns()
        reply = self.process.request(message)
        return (time.perf_counter_ns() - start) / 1e6, reply

    def _spot_check(self, outputs: list[Any], expected: list[torch.Tensor]) -> None:
        rtol, atol = self._tolerance()
        if len(outputs) != len(expected):
            raise StageFailed(Status.REJECTED, f"[stale-output] a timed call returned {len(outputs)} tensors, expected {len(expected)}")
        for (positions, values, shape), want in zip(outputs, expected, strict=True):
            if list(want.shape) != shape:
                raise StageFailed(Status.REJECTED, f"[stale-output] a timed call returned shape {shape}, expected {list(want.shape)}")
            reference = want.reshape(-1)[positions] if positions is not None else want
            outcome = compare_outputs(reference, values, rtol, atol)
            if not outcome.ok:
                _stale_output(outcome.message)

    def _check_plausible(self, ref_model: torch.nn.Module, sets: dict[str, list[Any]],
                         expected: dict[str, list[torch.Tensor]], first: Measurement) -> Measurement:
        """Re-measure an implausible speedup, then reject it if it beats the machine's roofline."""
        again = self._measure(expected)
        candidate = again if again.median_ms > first.median_ms else first
        inputs = next(iter(sets.values()))
        outputs = self.reference_forward(ref_model, inputs)
        nbytes, flops = io_bytes(inputs, outputs), count_flops(ref_model, _clone(inputs))
        bandwidth, flop_rate = device_ceilings(self.device.type, nbytes, self.config.num_threads)
        bound = roofline_ms(nbytes, flops, bandwidth, flop_rate)
        if candidate.median_ms < bound / self.config.roofline_slack:
            raise StageFailed(
                Status.REJECTED,
                f"[roofline] {candidate.median_ms:.4f} ms is faster than this machine can move {nbytes} bytes and do "
                f"{flops} FLOPs ({bound:.4f} ms at measured peaks); the timing cannot be real",
            )
        return candidate

    def _tolerance(self) -> tuple[float, float]:
        rtol, atol = self.task.tolerance
        return (self.config.rtol if self.config.rtol is not None else rtol,
                self.config.atol if self.config.atol is not None else atol)

    # -- driver ---------------------------------------------------------------------------------------

    def run(self, cached_reference: dict | None = None, compile_candidate: bool = False,
            reference_only: bool = False) -> EvalResult:
        """The stages in order. `reference_only`: the task's own `Model` stands in as the candidate (the
        supervisor's reference timing), so the correctness stage, which would compare it with itself, is skipped."""
        t = self.config.timeouts
        result = self.result
        start = time.perf_counter()
        try:
            with torch.no_grad():
                with self.stage("static", t.build):
                    self.static()
                with self.stage("build", t.build):
                    self.build()
                if not self.backend.has_device() and self.candidate.backend == "cuda":
                    result.status = Status.COMPILED
                else:
                    with self.stage("init", t.init):
                        ref_model = self.init(compile_candidate)
                    if not reference_only:
                        with self.stage("correctness", t.correctness):
                            self.correctness(ref_model)
                    if self.config.measure_timing and self.backend.timing_meaningful():
                        with self.stage("timing", t.timing):
                            self.timing(ref_model, cached_reference)
                    elif not self.backend.timing_meaningful():
                        result.notes.append("timing skipped: not meaningful on this device")
        except StageFailed as failure:
            result.status, result.error = failure.status, failure.message
            if failure.status in (Status.COMPILE_ERROR, Status.REJECTED):  # nothing was compiled to "not run"
                result.notes = [n for n in result.notes if n not in self.backend.notes()]
        finally:
            self.process.close()
        result.environment = environment(self.backend, self.device, self.config)
        result.total_s = time.perf_counter() - start
        result.feedback = build_feedback(result)
        return result


_GPU_MESSAGES = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver", "No CUDA GPUs are available",
                 "CUDA driver", "cuda is not available")


def task_failure(what: str, exc: BaseException) -> StageFailed:
    """A task problem as one line: `what`, the likely cause in words where known, the exception and the
    innermost line of the task's own file. Not the candidate's fault; no verdict (runtime_error)."""
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}".strip().rstrip(":")
    name = type(exc).__name__
    cause = ""
    if isinstance(exc, ModuleNotFoundError):
        cause = f"it imports {exc.name!r}, which is not installed on this machine"
    elif any(m.lower() in str(exc).lower() for m in _GPU_MESSAGES) and not torch.cuda.is_available():
        cause = "it puts tensors on a GPU (.cuda() / device='cuda') and this machine has none"
    elif name in ("OfflineModeIsEnabled", "LocalEntryNotFoundError") or "huggingface" in type(exc).__module__ or (
            "huggingface.co" in str(exc) or "HF_HUB_OFFLINE" in str(exc)):
        cause = "it downloads from the Hugging Face Hub, which cannot be reached here (offline or no network)"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == TASK_FILE]
    where = f" at {TASK_FILE} line {frames[-1].lineno}" if frames else ""
    return StageFailed(Status.RUNTIME_ERROR, f"{what}: {cause + ' (' + text + ')' if cause else text}{where}")


def _input_bytes(inputs: list[Any]) -> int:
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def _finite_mask(t: torch.Tensor) -> torch.Tensor | bool | None:
    """Where float tensor `t` is finite: True when everywhere (the usual case, no mask kept); None for other dtypes."""
    if not t.is_floating_point():
        return None
    mask = t.isfinite()
    return True if bool(mask.all()) else mask


def _finite_where(t: torch.Tensor, mask: torch.Tensor | bool | None) -> bool:
    """Whether `t` is finite wherever `mask` (from `_finite_mask`) says the base output was (a shape that
    differs from the mask's: finite everywhere)."""
    if mask is None:
        return True
    if mask is True or mask.shape != t.shape:
        return bool(t.isfinite().all())
    return bool(t.isfinite().logical_or_(~mask).all())


def seed_torch(seed: int) -> None:
    """`torch.manual_seed`, less its cost where no accelerator can be used: there it formats a stack trace
    per accelerator kind for a lazy seeding that can never run (~0.25 ms a call)."""
    accelerated = torch.cuda.is_available() or torch.backends.mps.is_available() or (
        hasattr(torch, "xpu") and torch.xpu.is_available())
    if accelerated:
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def _stale_output(message: str) -> None:
    raise StageFailed(
        Status.REJECTED,
        "[stale-output] a timed call returned a wrong result (outputs cached across calls, work skipped, "
        f"or finished after the call returned): {message}",
    )


_NO_POSITIONS = torch.empty(0, dtype=torch.long)


def _flat_tensors(output: Any) -> list[torch.Tensor]:
    if isinstance(output, list | tuple):
        return [t for o in output for t in _flat_tensors(o)]
    if isinstance(output, torch.Tensor):
        return [output]
    raise StageFailed(Status.RUNTIME_ERROR, f"the task's forward returned {type(output).__name__}; timing needs tensor outputs")


def _clone(inputs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def environment(backend: Backend, device: torch.device, config: EvalConfig) -> dict[str, Any]:
    env: dict[str, Any] = {
        "backend": backend.name, "device": str(device), "torch": torch.__version__,
        "python": platform.python_version(), "threads": config.num_threads, "machine": platform.machine(),
    }
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
    if "triton" in sys.modules:
        env["triton"] = getattr(sys.modules["triton"], "__version__", "?")
    return env

