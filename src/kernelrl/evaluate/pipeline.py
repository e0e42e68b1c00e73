"""The evaluation pipeline, run inside a disposable process: static -> build -> init -> correctness -> timing.

`run_pipeline` never raises for anything the candidate does: every failure becomes a status and a
message in the returned `EvalResult`. Stage starts are announced through `announce` so the
supervising process can apply each stage's wall-clock limit.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import platform
import random
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from kernelrl.evaluate.backends import Backend, get_backend
from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.compare import compare_outputs
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.feedback import build_feedback, compile_error_text
from kernelrl.evaluate.guards import (
    LaunchCounter,
    OpCounter,
    aliased,
    count_flops,
    declared_cuda_kernels,
    device_ceilings,
    io_bytes,
    launched_own_kernel,
    mutated,
    poison_allocator,
    profiled_cuda_kernels,
    roofline_ms,
    spawned_processes,
    tensors,
)
from kernelrl.evaluate.kernel_calls import install_extension_counter, kernel_calls_total
from kernelrl.evaluate.loading import CANDIDATE_FILE, TASK_FILE, describe_exception, load_module
from kernelrl.evaluate.result import Correctness, EvalResult, StageReport, Status, Timing
from kernelrl.evaluate.static import run_static_checks
from kernelrl.evaluate.timing import Measurement, clock_for, measure
from kernelrl.native import CompileError, call_counts, reset_call_counts
from kernelrl.tasks.task import Task

Announce = Callable[[str, float], None]


class StageFailed(Exception):
    """Stops the pipeline with a status; the stage's message goes into the result."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Pipeline:
    def __init__(self, task: Task, candidate: Candidate, config: EvalConfig, announce: Announce) -> None:
        self.task, self.candidate, self.config, self.announce = task, candidate, config, announce
        self.backend: Backend = get_backend(candidate.backend)
        self.device = self.backend.device(config.device_index)
        self.verified_sample: tuple[list[Any], Any] | None = None  # trial-0 inputs and sampled expected rows
        self.result = EvalResult(
            status=Status.OK,
            task_id=task.id,
            backend=candidate.backend,
            device=str(self.device),
            size_overrides={k: list(v) for k, v in task.size_overrides.items()},
            notes=list(self.backend.notes()),
        )

    @contextlib.contextmanager
    def stage(self, name: str, timeout: float) -> Iterator[None]:
        self.announce(name, timeout)
        start, cpu_start = time.perf_counter(), time.process_time()
        report = StageReport(name=name, status="ok", duration_s=0.0)
        self.result.stages.append(report)
        try:
            yield
        except StageFailed as failure:
            report.status, report.message = "failed", failure.message
            raise
        finally:
            report.duration_s = time.perf_counter() - start
            report.cpu_s = time.process_time() - cpu_start

    # -- stages ---------------------------------------------------------------------------------

    def static(self) -> None:
        try:
            tree = ast.parse(self.candidate.source, filename=CANDIDATE_FILE)
        except SyntaxError as exc:
            raise StageFailed(
                Status.COMPILE_ERROR, f"SyntaxError: {exc.msg} ({CANDIDATE_FILE} line {exc.lineno})"
            ) from None
        findings = run_static_checks(tree, self.candidate.source, self.backend, self.config.static_severity)
        self.result.static_findings = [f.to_dict() for f in findings]
        rejects = [f for f in findings if f.severity == "reject"]
        if any(f.check == "defines-model-new" for f in rejects):
            raise StageFailed(Status.COMPILE_ERROR, "the candidate must define `class ModelNew(nn.Module)`")
        if rejects:
            raise StageFailed(Status.REJECTED, "; ".join(f"[{f.check}] {f.message}" for f in rejects))

    def build(self) -> tuple[Any, Any]:
        try:
            reference = load_module(self.task.source, TASK_FILE, "kernelrl_reference")
        except Exception as exc:  # the task itself is broken: not the candidate's fault, but no verdict
            raise StageFailed(Status.RUNTIME_ERROR, "the reference task failed to load: " + describe_exception(exc, (TASK_FILE,))) from None
        if self.config.guards:
            install_extension_counter()
            if self.candidate.backend == "triton":
                LaunchCounter.install()
        try:
            module = load_module(self.candidate.source, CANDIDATE_FILE, "kernelrl_candidate")
        except CompileError as exc:
            raise StageFailed(Status.COMPILE_ERROR, compile_error_text(exc, self.candidate.source)) from None
        except Exception as exc:
            raise StageFailed(Status.COMPILE_ERROR, describe_exception(exc)) from None
        model_new = getattr(module, "ModelNew", None)
        if not (isinstance(model_new, type) and issubclass(model_new, torch.nn.Module)):
            raise StageFailed(Status.COMPILE_ERROR, "ModelNew must be a class deriving from torch.nn.Module")
        return reference, model_new

    def init(self, reference: Any, model_new: type) -> tuple[torch.nn.Module, torch.nn.Module]:
        seed = self.task.seed + self.config.seed
        torch.manual_seed(seed)
        try:
            init_inputs = reference.get_init_inputs()
            torch.manual_seed(seed)
            ref_model = reference.Model(*init_inputs).to(self.device)
        except Exception as exc:
            raise StageFailed(Status.RUNTIME_ERROR, "the reference model failed to build: " + describe_exception(exc, (TASK_FILE,))) from None
        try:
            torch.manual_seed(seed)
            new_model = model_new(*init_inputs).to(self.device)
        except Exception as exc:
            raise StageFailed(
                Status.RUNTIME_ERROR,
                "ModelNew(*get_init_inputs()) failed; it must take the same constructor arguments as Model. "
                + describe_exception(exc),
            ) from None
        ref_state, new_state = ref_model.state_dict(), new_model.state_dict()
        if ref_state.keys() == new_state.keys() and all(ref_state[k].shape == new_state[k].shape for k in ref_state):
            new_model.load_state_dict(ref_state)
        elif ref_state:
            self.result.notes.append("state dicts differ: reference weights were not copied into ModelNew")
        return ref_model, new_model

    def inputs(self, trial: int) -> list[Any]:
        torch.manual_seed(self.task.seed + self.config.seed + 1000 + trial)
        inputs = self.reference.get_inputs()
        return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]

    def correctness(self, ref_model: torch.nn.Module, new_model: torch.nn.Module) -> None:
        """Trials on fresh inputs; with guards, alternating which model runs first and checking that the
        candidate's own kernel did the work, without torch compute ops, input mutation or aliasing."""
        rtol, atol = self.task.tolerance
        rtol = self.config.rtol if self.config.rtol is not None else rtol
        atol = self.config.atol if self.config.atol is not None else atol
        trials, guards = self.config.correctness_trials, self.config.guards
        detail = Correctness(trials=trials, passed=0, rtol=rtol, atol=atol)
        self.result.correctness = detail
        reset_call_counts()
        LaunchCounter.launches.clear()
        torch_ops: dict[str, int] = {}
        expected_like: list[torch.Tensor] = []
        weights = [*new_model.parameters(), *ref_model.parameters()]
        poisoned = False
        for trial in range(trials):
            inputs = self.inputs(trial)
            candidate_first = guards and trial % 2 == 1
            if not candidate_first:
                expected = ref_model(*_clone(inputs))
            candidate_inputs = _clone(inputs)
            if guards and expected_like and not candidate_first and not poisoned:
                # Stale memory can only hold this trial's answer when the reference ran first on these
                # inputs; poisoning one such trial (after trial 0 told us the output shapes) exposes it.
                poison_allocator(expected_like)
                poisoned = True
            calls_before = kernel_calls_total()
            counter = OpCounter() if guards else contextlib.nullcontext()
            try:
                with counter:
                    actual = new_model(*candidate_inputs)
                    self._synchronize()
            except Exception as exc:
                detail.failing_trial = trial
                message = describe_exception(exc)
                hints = self.backend.interpreter_hints(self.candidate.source)
                raise StageFailed(Status.RUNTIME_ERROR, "\n".join([message, *hints])) from None
            if candidate_first:
                expected = ref_model(*_clone(inputs))
            if guards:
                self._check_trial(inputs, candidate_inputs, actual, weights, calls_before, counter, torch_ops,
                                  check_inputs=trial <= 1)
            outcome = compare_outputs(expected, actual, rtol, atol)
            detail.max_abs_error = max(detail.max_abs_error, outcome.max_abs_error)
            detail.max_rel_error = max(detail.max_rel_error, outcome.max_rel_error)
            if not outcome.ok:
                detail.failing_trial, detail.message = trial, outcome.message
                raise StageFailed(Status.INCORRECT, f"trial {trial + 1}/{trials}: {outcome.message}")
            expected_like = tensors(expected)
            if trial == 0 and guards:
                self.verified_sample = (inputs, _sample_rows(expected))  # reused by the fresh-input check
            detail.passed += 1
        self.result.kernel_calls = {**call_counts(), **LaunchCounter.launches}
        if guards and self.candidate.backend == "cuda" and self.device.type == "cuda":
            self._check_cuda_kernels_ran(new_model)
        if torch_ops:
            self.result.notes.append("torch compute ops in forward: " + ", ".join(f"{k}x{v}" for k, v in torch_ops.items()))

    def _check_cuda_kernels_ran(self, new_model: torch.nn.Module) -> None:
        """One more forward under the profiler: a kernel the candidate defines must be among those launched."""
        declared = declared_cuda_kernels(self.candidate.source)
        if not declared:
            self.result.notes.append("no __global__ function found in the source: kernel names not checked")
            return
        launched = profiled_cuda_kernels(lambda: new_model(*_clone(self.inputs(0))))
        if not launched_own_kernel(declared, launched):
            seen = ", ".join(sorted(set(launched))[:5]) or "no kernels"
            raise StageFailed(
                Status.REJECTED,
                f"[kernel-not-launched] none of your kernels ({', '.join(sorted(declared))}) ran on the GPU during "
                f"forward; the profiler saw {seen}. Launch your own kernel to compute the output",
            )

    def _check_trial(
        self, inputs: list[Any], used: list[Any], actual: Any, weights: list[torch.Tensor], calls_before: int,
        counter: Any, torch_ops: dict[str, int], check_inputs: bool = True,
    ) -> None:
        if spawned_processes():
            raise StageFailed(Status.REJECTED, "[processes] forward started processes; a kernel only computes")
        # One trial in each order here; the timed calls are checked as a whole after timing (`_measure`).
        if check_inputs and mutated(inputs, used):
            raise StageFailed(Status.REJECTED, "[input-mutation] the candidate modified its inputs; write results to new tensors")
        if aliased(actual, tensors(used) + weights):
            raise StageFailed(
                Status.REJECTED, "[output-alias] an output shares memory with an input or a weight; return a new tensor"
            )
        if self.backend.has_device() and kernel_calls_total() == calls_before and self.candidate.backend in ("cpu", "triton"):
            raise StageFailed(
                Status.REJECTED,
                f"[kernel-not-called] forward made no call to a {self.candidate.backend} kernel; {self.backend.kernel_hint()}",
            )
        for name, count in counter.compute.items():
            torch_ops[name] = torch_ops.get(name, 0) + count
        if counter.compute and self.config.torch_ops == "reject":
            ops = ", ".join(f"{k} ({v}x)" for k, v in counter.compute.most_common(6))
            raise StageFailed(
                Status.REJECTED,
                f"[torch-ops] forward computed with PyTorch operators ({ops}); do the computation in your kernel "
                "(allocating outputs and reshaping views is fine)",
            )

    def timing(self, ref_model: torch.nn.Module, new_model: torch.nn.Module, cached: dict | None) -> None:
        cfg = self.config
        timing = Timing(meaningful=True, method=self.backend.timing_method(cfg.num_threads))
        self.result.timing = timing
        inputs = self.inputs(cfg.correctness_trials)
        hooks = FreshInputChecks(self, ref_model, inputs, self.verified_sample) if cfg.guards and cfg.cache_checks else None
        candidate = self._measure(new_model, inputs, hooks)
        if cached:
            timing.reference_ms, timing.reference_spread_ms = cached["reference_ms"], cached["reference_spread_ms"]
            timing.compiled_reference_ms = cached.get("compiled_reference_ms")
            timing.reference_cached = True
        else:
            reference = self._measure(ref_model, inputs)
            timing.reference_ms, timing.reference_spread_ms = reference.median_ms, reference.spread_ms
            if cfg.compile_baseline:
                timing.compiled_reference_ms = self._measure(torch.compile(copy.deepcopy(ref_model)), inputs).median_ms
        speedup = timing.reference_ms / max(candidate.median_ms, 1e-9)
        if cfg.guards and speedup > cfg.suspicious_speedup:
            candidate = self._check_plausible(ref_model, new_model, inputs, hooks, candidate)
            self.result.notes.append(f"speedup {speedup:.1f}x was re-measured and checked against the roofline")
        timing.candidate_ms, timing.candidate_spread_ms, timing.trials = (
            candidate.median_ms, candidate.spread_ms, candidate.trials
        )
        timing.speedup = timing.reference_ms / max(timing.candidate_ms, 1e-9)
        if timing.compiled_reference_ms:
            timing.speedup_vs_compiled = timing.compiled_reference_ms / max(timing.candidate_ms, 1e-9)

    def _measure(self, model: torch.nn.Module, inputs: list[Any], hooks: FreshInputChecks | None = None) -> Measurement:
        """Time `model` on `inputs`; with `hooks` (the candidate under guards), the inputs must come out of
        the timed calls as they went in (or as the fresh-input check last set them): a kernel that zeroes or
        shrinks its inputs after the first call would otherwise time later calls on easier data."""
        cfg = self.config
        if hooks is not None:
            hooks.expected_inputs = _clone(inputs)
        try:
            result = measure(lambda: model(*inputs), clock_for(self.device), cfg.warmup, cfg.timing_trials,
                             cfg.timing_budget_s, hooks)
        except StageFailed:
            raise
        except Exception as exc:
            raise StageFailed(Status.RUNTIME_ERROR, "while timing: " + describe_exception(exc)) from None
        if hooks is not None and mutated(hooks.expected_inputs, inputs):
            raise StageFailed(Status.REJECTED, "[input-mutation] a timed call modified its inputs; write results to new tensors")
        return result

    def _check_plausible(
        self, ref_model: torch.nn.Module, new_model: torch.nn.Module, inputs: list[Any], hooks: Any, first: Measurement
    ) -> Measurement:
        """Re-measure an implausible speedup, then reject it if it beats the machine's roofline."""
        again = self._measure(new_model, inputs, hooks)
        candidate = again if again.median_ms > first.median_ms else first
        outputs = ref_model(*_clone(inputs))
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

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- driver ---------------------------------------------------------------------------------

    def run(self, cached_reference: dict | None = None) -> EvalResult:
        t = self.config.timeouts
        result = self.result
        start = time.perf_counter()
        try:
            with torch.no_grad():
                with self.stage("static", t.build):
                    self.static()
                with self.stage("build", t.build):
                    self.reference, model_new = self.build()
                if not self.backend.has_device() and self.candidate.backend == "cuda":
                    result.status = Status.COMPILED
                else:
                    with self.stage("init", t.init):
                        ref_model, new_model = self.init(self.reference, model_new)
                    with self.stage("correctness", t.correctness):
                        self.correctness(ref_model, new_model)
                    if self.config.measure_timing and self.backend.timing_meaningful():
                        with self.stage("timing", t.timing):
                            self.timing(ref_model, new_model, cached_reference)
                    elif not self.backend.timing_meaningful():
                        result.notes.append("timing skipped: not meaningful on this device")
        except StageFailed as failure:
            result.status, result.error = failure.status, failure.message
        result.environment = environment(self.backend, self.device, self.config)
        result.total_s = time.perf_counter() - start
        result.feedback = build_feedback(result)
        return result


class FreshInputChecks:
    """On a few timed trials chosen at random, give the inputs new values in place (outside the timed
    region) and verify that trial's output, snapshotted as soon as the clock stops. Catches outputs cached
    across calls (by pointer, identity or call count) and work deferred past the timer.

    The first check loads correctness trial 0's inputs, whose expected output rows are already known, so it
    costs one copy and no reference forward; further checks permute the inputs and run the reference.
    """

    def __init__(
        self, pipeline: Pipeline, ref_model: torch.nn.Module, inputs: list[Any], verified: tuple[list[Any], Any] | None
    ) -> None:
        self.pipeline, self.ref_model, self.inputs = pipeline, ref_model, inputs
        self.verified = verified if verified is not None and _same_layout(verified[0], inputs) else None
        self.chosen: set[int] = set()
        self.expected: Any = None
        self.expected_inputs: list[Any] = []  # what the inputs must hold after the timed calls
        self.random = random.SystemRandom()

    def before(self, index: int, total: int) -> None:
        if index == 0:
            self.chosen = set(self.random.sample(range(total - 1), min(self.pipeline.config.cache_checks, total - 1)))
        if index not in self.chosen:
            return
        if self.verified is not None:
            verified_inputs, self.expected = self.verified
            self.verified = None  # the same values twice in a row would not be fresh
            for target, source in zip(self.inputs, verified_inputs, strict=True):
                if isinstance(target, torch.Tensor):
                    target.copy_(source)
            self.expected_inputs = verified_inputs
        else:
            self._reshuffle()
            self.expected = None
            self.expected_inputs = _clone(self.inputs)

    def _reshuffle(self) -> None:
        """New values in the same buffers, drawn from the inputs themselves so they stay in the task's
        domain (positive, normalised rows, ...): batch rows permuted consistently across inputs, or,
        for a batch of one, each row rolled."""
        floats = [x for x in self.inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() >= 1]
        if not floats:
            return
        rows = floats[0].shape[0]
        if rows > 1:
            perm = torch.roll(torch.arange(rows), self.random.randrange(1, rows))
            for x in floats:
                if x.shape[0] == rows:
                    x.copy_(x[perm.to(x.device)])
        else:
            shift = self.random.randrange(1, max(2, floats[0].shape[-1]))
            for x in floats:
                x.copy_(torch.roll(x, shift, dims=-1))

    def after(self, index: int, total: int, output: Any) -> None:
        if index not in self.chosen:
            return
        snapshot = _sample_rows(output)
        expected = self.expected if self.expected is not None else _sample_rows(self.ref_model(*_clone(self.inputs)))
        rtol, atol = self.pipeline.task.tolerance
        outcome = compare_outputs(expected, snapshot, rtol, atol)
        if not outcome.ok:
            raise StageFailed(
                Status.REJECTED,
                "[stale-output] a timed call returned a wrong result on fresh inputs (outputs cached across calls, "
                f"or work finished after the call returned): {outcome.message}",
            )


def _same_layout(a: list[Any], b: list[Any]) -> bool:
    """Same number of inputs; tensors of the same shape and dtype, other inputs equal."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
        else:
            try:
                if x != y:
                    return False
            except Exception:  # values without a plain truth value (arrays, ...)
                return False
    return True


SAMPLED_ROWS = 64


def _sample_rows(output: Any) -> Any:
    """A copy of (a fixed spread of up to 64 rows of) each output tensor: checking a few rows catches a
    stale or unfinished output as surely as checking all, at a fraction of the cost."""
    if isinstance(output, list | tuple):
        return [_sample_rows(o) for o in output]
    if isinstance(output, torch.Tensor) and output.dim() >= 1 and output.shape[0] > SAMPLED_ROWS:
        rows = torch.linspace(0, output.shape[0] - 1, SAMPLED_ROWS, device=output.device).long()
        return output.index_select(0, rows)
    return output.clone() if isinstance(output, torch.Tensor) else copy.deepcopy(output)


def _clone(inputs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def environment(backend: Backend, device: torch.device, config: EvalConfig) -> dict[str, Any]:
    env: dict[str, Any] = {
        "backend": backend.name,
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": config.num_threads,
        "machine": platform.machine(),
    }
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
    if "triton" in sys.modules:
        env["triton"] = getattr(sys.modules["triton"], "__version__", "?")
    return env


def run_pipeline(
    task: Task, candidate: Candidate, config: EvalConfig, announce: Announce, cached_reference: dict | None = None
) -> EvalResult:
    return Pipeline(task, candidate, config, announce).run(cached_reference)
