"""The compressor interface and its registry.

A compressor turns a document's raw bytes into a compressed view. `compress`/`decompress` work on
the serialised form (bytes); `symbols` is the view the language model reads, a sequence of ids
below `symbol_vocab` (bytes for gzip and arithmetic coding, BPE ids for the tokenizer).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import ValidationError

from kernelrl.config_system import ConfigModel
from kernelrl.registry import Registry


class CompressorOptions(ConfigModel):
    """Base for each compressor's options (no unknown keys)."""


class Compressor(ABC):
    """A (possibly trained) map from raw bytes to a compressed view."""

    Options: ClassVar[type[CompressorOptions]] = CompressorOptions
    invertible: ClassVar[bool] = True

    def __init__(self, options: CompressorOptions) -> None:
        self.options = options

    @property
    def symbol_vocab(self) -> int:
        """Number of distinct ids `symbols` can return."""
        return 256

    @property
    def bytes_per_symbol(self) -> int:
        """Bytes one symbol takes in the serialised form."""
        return 1

    def fit(self, docs: Sequence[bytes], seed: int = 0) -> dict[str, Any]:
        """Train on raw training documents (no-op by default); returns facts worth reporting."""
        return {}

    @abstractmethod
    def compress(self, data: bytes) -> bytes:
        """Serialised compressed form of `data`."""

    @abstractmethod
    def decompress(self, blob: bytes) -> bytes:
        """Inverse of `compress`."""

    def symbols(self, data: bytes) -> np.ndarray:
        """The view the model reads: int64 ids in [0, symbol_vocab), shape [n]."""
        return np.frombuffer(self.compress(data), dtype=np.uint8).astype(np.int64)

    def symbols_many(
        self, docs: Sequence[bytes], on_progress: Callable[[int], None] | None = None
    ) -> list[np.ndarray]:
        """`symbols` for many documents; `on_progress(n_done)` is called as work completes."""
        out = []
        for i, doc in enumerate(docs):
            out.append(self.symbols(doc))
            if on_progress is not None and (i + 1) % 256 == 0:
                on_progress(i + 1)
        if on_progress is not None:
            on_progress(len(docs))
        return out


COMPRESSORS: Registry[type[Compressor]] = Registry("compressor")


def make_compressor(name: str, options: Mapping[str, Any] | CompressorOptions | None = None) -> Compressor:
    """Build the compressor registered as `name` with validated `options`."""
    cls = COMPRESSORS.get(name)
    if isinstance(options, CompressorOptions):
        if not isinstance(options, cls.Options):
            raise TypeError(f"compressor {name!r} takes {cls.Options.__name__}, got {type(options).__name__}")
        return cls(options)
    try:
        opts = cls.Options.model_validate(dict(options or {}))
    except ValidationError as err:
        raise ValueError(f"bad options for compressor {name!r}: {err}") from None
    return cls(opts)
