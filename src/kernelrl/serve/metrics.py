"""Prometheus text exposition (format 0.0.4) of the service's counters, gauges and latency summaries."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelrl.serve.service import Service

QUANTILES = (0.5, 0.9, 0.99)


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def _family(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


def _summary(name: str, help_text: str, values: Iterable[float]) -> list[str]:
    data = sorted(values)
    samples = [(f'{{quantile="{q}"}}', _quantile(data, q)) for q in QUANTILES]
    lines = _family(name, "summary", help_text + " (recent window)", samples)
    lines += [f"{name}_count {len(data)}", f"{name}_sum {sum(data):g}"]
    return lines


def render_metrics(service: Service, responses: Counter[int]) -> str:
    stats = service.stats
    counts = service.store.counts()
    workers = service.executor.workers()
    lines: list[str] = []
    lines += _family("kernelrl_jobs_submitted_total", "counter", "Jobs accepted (idempotent resubmissions excluded).",
                     [("", stats.submitted)])
    lines += _family("kernelrl_jobs_duplicate_total", "counter", "Submissions that matched an earlier idempotency key.",
                     [("", stats.duplicates)])
    lines += _family("kernelrl_jobs_completed_total", "counter", "Jobs finished by this process, by result status.",
                     [(f'{{status="{k}"}}', v) for k, v in sorted(stats.completed.items())] or [('{status="ok"}', 0)])
    lines += _family("kernelrl_jobs", "gauge", "Jobs in the store by state.",
                     [(f'{{state="{k}"}}', v) for k, v in sorted(counts.items())])
    lines += _family("kernelrl_jobs_requeued_at_start", "gauge", "Running jobs re-queued when this process started.",
                     [("", service.requeued)])
    lines += _summary("kernelrl_queue_latency_seconds", "Seconds from acceptance to start.", stats.queue_latency)
    lines += _summary("kernelrl_execution_seconds", "Seconds from start to result.", stats.exec_latency)
    lines += _family("kernelrl_workers", "gauge", "Worker slots of the executor.", [("", workers.get("capacity", 0))])
    lines += _family("kernelrl_workers_busy", "gauge", "Worker slots running a job.", [("", workers.get("busy", 0))])
    lines += _family("kernelrl_worker_restarts_total", "counter", "Workers replaced after dying.",
                     [("", service.executor.restarts)])
    lines += _family("kernelrl_reference_cache_total", "counter", "Reference-timing cache lookups.",
                     [('{result="hit"}', stats.reference_hits), ('{result="miss"}', stats.reference_misses)])
    lines += _family("kernelrl_internal_errors_recent", "gauge", "Recent store/dispatch errors the service survived.",
                     [("", len(stats.dispatch_errors))])
    lines += _family("kernelrl_http_responses_total", "counter", "HTTP responses by status code.",
                     [(f'{{code="{k}"}}', v) for k, v in sorted(responses.items())])
    if stats.exec_latency:
        lines += _family("kernelrl_execution_seconds_mean", "gauge", "Mean execution seconds (recent window).",
                         [("", statistics.fmean(stats.exec_latency))])
    return "\n".join(lines) + "\n"
