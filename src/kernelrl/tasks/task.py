"""The `Task` record: a KernelBench-format reference model plus metadata."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

# Default tolerances per dtype (fp32 1e-4; half precisions 1e-2), overridable per task.
DEFAULT_TOLERANCE: dict[str, float] = {"float32": 1e-4, "float64": 1e-6, "float16": 1e-2, "bfloat16": 1e-2}


class TaskError(ValueError):
    """A task file or record is malformed; the message names the file and the problem."""


@dataclass
class Task:
    """A reference `Model(nn.Module)` with `get_inputs()` and `get_init_inputs()` (KernelBench format).

    `source` is the module's Python text after any size overrides; `size_overrides` records what
    the loader changed (name -> (original, new)), so a result can say which shapes it ran.
    """

    id: str
    source: str
    level: int | None = None
    dtype: str = "float32"
    rtol: float | None = None
    atol: float | None = None
    seed: int = 0
    tags: list[str] = field(default_factory=list)
    notes: str = ""
    profiles: dict[str, dict[str, int]] = field(default_factory=dict)  # e.g. {"gpu": {"batch_size": 4096}}
    path: str | None = None
    size_overrides: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) with dtype-aware defaults."""
        default = DEFAULT_TOLERANCE.get(self.dtype, 1e-4)
        return (self.rtol if self.rtol is not None else default, self.atol if self.atol is not None else default)

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["size_overrides"] = {k: list(v) for k, v in self.size_overrides.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise TaskError(f"task record has unknown fields: {', '.join(sorted(unknown))}")
        data = dict(data)
        data["size_overrides"] = {k: tuple(v) for k, v in (data.get("size_overrides") or {}).items()}
        return cls(**data)
