"""The evaluation pipeline and its sandboxed worker pool."""

from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.config import EvalConfig, StageTimeouts
from kernelrl.evaluate.pool import EvalPool, evaluate, evaluate_many
from kernelrl.evaluate.result import Correctness, EvalResult, StageReport, Status, Timing
from kernelrl.evaluate.verdict_cache import VerdictCache

__all__ = [
    "Candidate",
    "Correctness",
    "EvalConfig",
    "EvalPool",
    "EvalResult",
    "StageReport",
    "StageTimeouts",
    "Status",
    "Timing",
    "VerdictCache",
    "evaluate",
    "evaluate_many",
]
