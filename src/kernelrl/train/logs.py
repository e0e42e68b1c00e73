"""Run logging: JSONL metrics, TensorBoard scalars and a progress bar with ETA."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any


class MetricsLogger:
    """Appends one JSON line per record to ``metrics.jsonl``; mirrors scalars to TensorBoard."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True, fresh: bool = False) -> None:
        """`fresh`: a new run in a directory an earlier run may have used starts ``metrics.jsonl`` and ``tb/`` anew
        (its curves would otherwise mix both runs' rows); a resumed run appends."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        if fresh:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(self.run_dir / "tb", ignore_errors=True)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:  # a core dependency; an install without it still runs, without TensorBoard
                print(f"note: TensorBoard logging off ({exc}); metrics.jsonl has every scalar", file=sys.stderr)
            else:
                self._tb = SummaryWriter(str(self.run_dir / "tb"))

    def log(self, phase: str, step: int, metrics: dict[str, Any]) -> None:
        clean = {k: (float(v) if isinstance(v, int | float) else v) for k, v in metrics.items()}
        with self.path.open("a") as f:
            f.write(json.dumps({"phase": phase, "step": step, **clean}) + "\n")
        if self._tb is not None:
            for k, v in clean.items():
                if isinstance(v, float) and math.isfinite(v):
                    self._tb.add_scalar(f"{phase}/{k}", v, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: str | Path, phase: str | None = None) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if phase is None or r.get("phase") == phase]


class Progress:
    """A rich progress bar with ETA (no-op when disabled)."""

    def __init__(self, total: int, description: str, enabled: bool = True) -> None:
        self._bar = None
        if enabled and total > 0:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                     TextColumn("{task.fields[info]}"))
            self._bar.start()
            self._task = self._bar.add_task(description, total=total, info="")

    def advance(self, info: str = "") -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, info=info)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
