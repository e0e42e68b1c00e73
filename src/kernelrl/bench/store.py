"""A run directory: `config.json`, `results.jsonl` (one trajectory per line, appended), reports.

Appends are whole lines under a lock and flushed; a line torn by a hard kill is dropped on the next
open, so a restart re-runs exactly the episodes that have no complete line.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from kernelrl.agent.records import Trajectory

RESULTS = "results.jsonl"
CONFIG = "config.json"


class RunStore:
    """Read and append the results of one benchmark run."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.results_path = self.dir / RESULTS
        self._lock = threading.Lock()
        self._repair()

    def _repair(self) -> None:
        """Drop a trailing partial line (the process died mid-write)."""
        if not self.results_path.exists():
            return
        data = self.results_path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with self.results_path.open("r+b") as handle:
                handle.truncate(keep)

    def load(self) -> list[Trajectory]:
        """Every complete trajectory; a later line for the same (task, sample) replaces an earlier one."""
        if not self.results_path.exists():
            return []
        found: dict[tuple[str, int], Trajectory] = {}
        for line in self.results_path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                traj = Trajectory.from_json(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
            found[(traj.task_id, traj.sample)] = traj
        return list(found.values())

    def done(self) -> set[tuple[str, int]]:
        return {(t.task_id, t.sample) for t in self.load()}

    def append(self, trajectory: Trajectory) -> None:
        line = trajectory.to_json() + "\n"
        with self._lock, self.results_path.open("a") as handle:
            handle.write(line)
            handle.flush()

    def read_config(self) -> dict[str, Any] | None:
        path = self.dir / CONFIG
        return json.loads(path.read_text()) if path.exists() else None

    def write_config(self, config: dict[str, Any]) -> None:
        (self.dir / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
