"""Human-readable rendering of an `EvalResult` (a rich table)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kernelrl.evaluate.result import EvalResult

STATUS_STYLE = {"ok": "bold green", "compiled": "bold cyan", "incorrect": "bold yellow"}


def print_result(result: EvalResult, console: Console | None = None) -> None:
    console = console or Console()
    style = STATUS_STYLE.get(str(result.status), "bold red")
    console.print(f"[{style}]{result.status}[/]  task {result.task_id}  backend {result.backend}  device {result.device}")
    stages = Table(title="stages", show_edge=False)
    for column in ("stage", "status", "seconds", "message"):
        stages.add_column(column)
    for stage in result.stages:
        stages.add_row(stage.name, stage.status, f"{stage.duration_s:.3f}", stage.message[:200])
    console.print(stages)
    if result.correctness:
        c = result.correctness
        console.print(
            f"correctness: {c.passed}/{c.trials} trials, max abs error {c.max_abs_error:.3g}, "
            f"max rel error {c.max_rel_error:.3g} (rtol {c.rtol:g}, atol {c.atol:g})"
        )
    t = result.timing
    if t and t.candidate_ms is not None:
        line = f"timing ({t.method}, {t.trials} trials): candidate {t.candidate_ms:.4f} ms ± {t.candidate_spread_ms:.4f}"
        if t.reference_ms is not None:
            line += f", reference {t.reference_ms:.4f} ms, speedup {t.speedup:.2f}x"
        if t.speedup_vs_compiled is not None:
            line += f", vs torch.compile {t.speedup_vs_compiled:.2f}x"
        console.print(line)
    if result.size_overrides:
        console.print("sizes changed: " + ", ".join(f"{k} {a}->{b}" for k, (a, b) in result.size_overrides.items()))
    for note in result.notes:
        console.print(f"note: {note}")
    if result.error:
        console.print(result.error, markup=False, highlight=False, style="red")
