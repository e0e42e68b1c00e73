"""Paths of the example task and candidates shipped inside the package (the `kernelrl eval` default)."""

from __future__ import annotations

from pathlib import Path

EXAMPLES_DIR = Path(__file__).parent / "data" / "examples"


def example_path(name: str) -> Path:
    """Path of a shipped example file, e.g. `example_path("scale_bias_relu.py")`."""
    path = EXAMPLES_DIR / name
    if not path.exists():
        known = ", ".join(sorted(p.name for p in EXAMPLES_DIR.iterdir()))
        raise FileNotFoundError(f"no shipped example {name!r}; known: {known}")
    return path
