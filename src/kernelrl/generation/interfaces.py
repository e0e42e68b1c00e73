"""The interfaces callers program against: a local `Engine` and a remote client both satisfy them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from kernelrl.generation.records import GenerationRequest, GenerationResult


@runtime_checkable
class Generator(Protocol):
    """Turns requests into results; `policy_version` is stamped on every generated token."""

    policy_version: int

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Run `requests` to completion; results in the order of `requests`."""
        ...


@runtime_checkable
class StepGenerator(Generator, Protocol):
    """A generator driven one token step at a time (what the CoPRIS scheduler needs)."""

    def add(self, request: GenerationRequest, resume_from: GenerationResult | None = None) -> None: ...

    def step(self) -> list[GenerationResult]:
        """Advance running requests by one token; return those that finished."""
        ...

    def abort_all(self) -> list[GenerationResult]:
        """Stop all requests; their partial results (finish_reason "abort")."""
        ...

    def has_unfinished(self) -> bool: ...
