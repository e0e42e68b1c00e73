"""`Candidate`: Python source defining `ModelNew`, tagged with the backend it targets."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernelrl.backend_names import BACKEND_NAMES as BACKENDS


@dataclass
class Candidate:
    """A candidate solution: `ModelNew(nn.Module)` with the reference `Model`'s constructor signature."""

    source: str
    backend: str = "cpu"
    id: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; use one of {', '.join(BACKENDS)}")
        if not isinstance(self.source, str):
            raise TypeError("candidate source must be a str")

    @classmethod
    def from_file(cls, path: str | Path, backend: str = "cpu") -> Candidate:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such candidate file")
        return cls(source=path.read_text(errors="replace"), backend=backend, id=path.stem)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
