"""Synthesis pipeline: compose -> dedup (own and excluded benchmarks) -> validity filters -> write.

Filters run in this process on our own generated references, each under a wall-clock limit (SIGALRM
in the main thread), so a pathological composition cannot hang the run. The runtime window is applied to
an estimate of what a task computes (`tasks.cost`), not to a clock: the same seed gives the same tasks on
any machine and under any load (only a wall-clock timeout, far above the window, can still differ).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernelrl.tasks.synth.compose import SynthTask, compose
from kernelrl.tasks.synth.dedup import DedupIndex, canonical_hash
from kernelrl.tasks.validate import CHECKS, TaskCheck, load_namespace, validate_source

# Rejection reasons, in the order the filters run.
REASONS = ("duplicate", "near-duplicate", "excluded", *CHECKS[:6], "runtime", "timeout", "compile")


class FilterTimeout(Exception):
    """A filter ran past its wall-clock limit."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise FilterTimeout after `seconds` (main thread only; elsewhere no limit is applied)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise FilterTimeout(f"exceeded {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class SynthConfig:
    n: int
    seed: int = 0
    max_ops: int = 4
    compile: bool = False  # also require torch.compile(model) to run and match eager
    compile_backend: str = "inductor"  # "aot_eager" checks tracing only, without code generation (fast)
    exclude: list[Path] = field(default_factory=list)  # benchmark directories to keep out of the output
    runtime_ms: tuple[float, float] = (0.1, 100.0)  # eager window, 1 thread
    runtime_basis: str = "estimated"  # "estimated" (tasks.cost): same seed, same tasks anywhere; or "measured"
    time_limit_s: float = 20.0  # per candidate, for the eager filters
    compile_time_limit_s: float = 120.0
    near_duplicate_jaccard: float = 0.9
    max_attempts: int | None = None  # default: 30 * n


@dataclass
class Synthesized:
    task: SynthTask
    check: TaskCheck
    source_hash: str

    def manifest_record(self, file: str) -> dict:
        t = self.task
        return {
            "id": f"synth/{t.name}", "file": file, "level": t.level, "family": t.family, "ops": t.ops,
            "op_signature": t.op_signature, "difficulty": t.difficulty, "tags": t.tags, "sizes": t.sizes,
            "runtime_ms": round(self.check.runtime_ms or 0.0, 4), "runtime_basis": self.check.runtime_basis,
            "output_shapes": self.check.output_shapes,
            "source_hash": self.source_hash,
        }


@dataclass
class SynthResult:
    tasks: list[Synthesized]
    rejected: Counter
    attempts: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Validated tasks per second."""
        return len(self.tasks) / self.elapsed_s if self.elapsed_s else 0.0


def compile_check(source: str, seed: int = 0, backend: str = "inductor") -> str | None:
    """None if torch.compile(model) runs and matches eager; otherwise the problem."""
    import torch

    namespace = load_namespace(source, "kernelrl_synth_compile")
    torch.manual_seed(seed)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    torch.manual_seed(seed + 1)
    inputs = namespace["get_inputs"]()
    with torch.no_grad():
        expected = model(*inputs)
        torch._dynamo.reset()
        actual = torch.compile(model, backend=backend, dynamic=False, fullgraph=True)(*inputs)
    if not torch.allclose(expected, actual, rtol=1e-3, atol=1e-3):
        return "compiled output differs from eager"
    return None


def synthesize(config: SynthConfig, progress: Callable[[int], None] | None = None) -> SynthResult:
    """Generate until `config.n` tasks pass every filter (or the attempt budget runs out).

    progress(k) is called with the number of tasks accepted by each attempt (0 or 1).
    """
    rng = random.Random(config.seed)
    own = DedupIndex(threshold=config.near_duplicate_jaccard)
    excluded = [DedupIndex.from_directory(d, config.near_duplicate_jaccard) for d in config.exclude]
    rejected: Counter = Counter({r: 0 for r in REASONS})
    accepted: list[Synthesized] = []
    attempts, limit = 0, config.max_attempts or 30 * config.n
    start = time.perf_counter()
    while len(accepted) < config.n and attempts < limit:
        attempts += 1
        task = compose(rng, config.max_ops, name=f"{len(accepted) + 1:04d}")
        reason = _filter(task, config, own, excluded)
        if isinstance(reason, str):
            rejected[reason] += 1
            if progress:
                progress(0)
            continue
        own.add(task.source, task.name)
        accepted.append(Synthesized(task, reason, canonical_hash(task.source)))
        if progress:
            progress(1)
    return SynthResult(accepted, rejected, attempts, time.perf_counter() - start)


def _filter(task: SynthTask, config: SynthConfig, own: DedupIndex, excluded: list[DedupIndex]) -> str | TaskCheck:
    """The first failed filter's reason, or the passing TaskCheck."""
    duplicate = own.check(task.source)
    if duplicate:
        return duplicate[0]
    if any(index.check(task.source) for index in excluded):
        return "excluded"
    try:
        with time_limit(config.time_limit_s):
            check = validate_source(task.source, f"synth/{task.name}", runtime_ms=config.runtime_ms, timing_trials=3,
                                    runtime_basis=config.runtime_basis)
    except FilterTimeout:
        return "timeout"
    if not check.ok:
        return check.first_problem or "runs"
    if config.compile:
        try:
            with time_limit(config.compile_time_limit_s):
                if compile_check(task.source, backend=config.compile_backend):
                    return "compile"
        except FilterTimeout:
            return "timeout"
        except Exception:
            return "compile"
    return check


def write_tasks(result: SynthResult, out: str | Path) -> Path:
    """Write each task as `<name>_<ops>.py` (KernelBench format) plus `manifest.jsonl`; returns the manifest."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.jsonl"
    with manifest.open("w") as handle:
        for item in result.tasks:
            file = f"{item.task.name}_{'_'.join(item.task.ops)[:60]}.py"
            (out / file).write_text(item.task.source)
            handle.write(json.dumps(item.manifest_record(file)) + "\n")
    return manifest
