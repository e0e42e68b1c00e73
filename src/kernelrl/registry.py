"""One registry pattern for every pluggable kind (backend, estimator, loss, reward, policy, compressor).

A `Registry` maps a name to a function or class; configs refer to entries by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of implementations of one kind.

    >>> losses = Registry[Callable]("policy loss")
    >>> @losses.register("ppo")
    ... def ppo(): ...
    >>> losses.get("ppo") is ppo
    True
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        """Decorator that adds an entry under `name` (and any aliases)."""

        def add(obj: T) -> T:
            for key in (name, *aliases):
                if key in self._entries and self._entries[key] is not obj:
                    raise ValueError(f"{self.kind} {key!r} is already registered")
                self._entries[key] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        """The entry called `name`; a KeyError that lists the known names otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
