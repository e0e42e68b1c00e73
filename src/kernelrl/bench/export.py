"""Trajectory export as JSONL: every turn (for SFT and analysis) or the accepted ones (rejection fine-tuning)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kernelrl.agent.records import Trajectory

EXPORT_MODES = ("turns", "sft", "rft")


def export_records(
    trajectories: Iterable[Trajectory], mode: str = "turns", min_speedup: float | None = None
) -> Iterator[dict[str, Any]]:
    """Records for training.

    - `turns`: one record per turn with messages, code, the EvalResult dict and the reward.
    - `sft`: per trajectory its best correct turn as a chat (`messages` ending with the answer).
    - `rft`: like `sft` but every correct turn at or above `min_speedup` (rejection sampling).
    """
    if mode not in EXPORT_MODES:
        raise ValueError(f"export mode must be one of {EXPORT_MODES}, got {mode!r}")
    for traj in trajectories:
        base = {"task_id": traj.task_id, "sample": traj.sample, "level": traj.level, "policy": traj.policy}
        if mode == "turns":
            for turn in traj.turns:
                yield {**base, "turn": turn.index, "messages": turn.messages, "code": turn.code,
                       "result": turn.result.to_dict() if turn.result else None, "reward": turn.reward, "feedback": turn.feedback}
            continue
        chosen = [traj.best_turn] if mode == "sft" else [t for t in traj.turns if t.correct]
        for turn in chosen:
            if turn is None or (min_speedup is not None and (turn.speedup or 0.0) < min_speedup):
                continue
            yield {**base, "turn": turn.index, "messages": turn.messages, "reward": turn.reward,
                   "speedup": turn.speedup, "code": turn.code}


def export_jsonl(trajectories: Iterable[Trajectory], path: str | Path, mode: str = "turns",
                 min_speedup: float | None = None) -> int:
    """Write `export_records` to `path`; returns the number of records."""
    count = 0
    with Path(path).open("w") as handle:
        for record in export_records(trajectories, mode, min_speedup):
            handle.write(json.dumps(record) + "\n")
            count += 1
    return count
