"""`neuronxcc.nki.typing`: the annotation types NKI kernels use (`nt.tensor[shape, dtype]`). Annotations
are recorded, never checked: the interpreter checks shapes where instructions use them."""

from __future__ import annotations

from typing import Any

__all__ = ["mutable_tensor", "scalar", "tensor"]


class _Annotation:
    """A subscriptable annotation: `tensor`, `tensor[(128, 512), nl.float32]`."""

    def __init__(self, name: str, params: Any = None) -> None:
        self.name, self.params = name, params

    def __getitem__(self, params: Any) -> _Annotation:
        return _Annotation(self.name, params)

    def __repr__(self) -> str:
        return f"nt.{self.name}" + (f"[{self.params!r}]" if self.params is not None else "")


tensor = _Annotation("tensor")
mutable_tensor = _Annotation("mutable_tensor")
scalar = _Annotation("scalar")
