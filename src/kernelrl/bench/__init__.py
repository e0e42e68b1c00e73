"""Benchmark runs over task suites: resumable runner, metrics, reports and plots, trajectory export."""

from kernelrl.bench.export import export_jsonl, export_records
from kernelrl.bench.metrics import P_VALUES, fast_p, geomean, pass_at_k, summarize
from kernelrl.bench.report import compare_markdown, write_report
from kernelrl.bench.runner import BenchConfig, BenchRun, ResumeMismatch, run_bench
from kernelrl.bench.store import RunStore

__all__ = [
    "P_VALUES",
    "BenchConfig",
    "BenchRun",
    "ResumeMismatch",
    "RunStore",
    "compare_markdown",
    "export_jsonl",
    "export_records",
    "fast_p",
    "geomean",
    "pass_at_k",
    "run_bench",
    "summarize",
    "write_report",
]
