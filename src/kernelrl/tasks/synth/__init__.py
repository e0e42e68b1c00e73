"""Task synthesis (as in CUDA Agent): compose registered torch ops into new KernelBench-format tasks,
filter them (runs, deterministic, not degenerate, runtime window, optional torch.compile), remove
duplicates (also against benchmark directories) and tag difficulty."""

from kernelrl.tasks.synth.compose import SynthTask, compose, difficulty
from kernelrl.tasks.synth.dedup import DedupIndex, canonical_hash, jaccard, op_signature, shingles
from kernelrl.tasks.synth.ops import OPS, Dim, OpSpec, Step
from kernelrl.tasks.synth.pipeline import REASONS, SynthConfig, SynthResult, synthesize, write_tasks

__all__ = [
    "OPS",
    "REASONS",
    "DedupIndex",
    "Dim",
    "OpSpec",
    "Step",
    "SynthConfig",
    "SynthResult",
    "SynthTask",
    "canonical_hash",
    "compose",
    "difficulty",
    "jaccard",
    "op_signature",
    "shingles",
    "synthesize",
    "write_tasks",
]
