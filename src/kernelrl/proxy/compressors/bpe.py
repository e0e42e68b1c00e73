"""A byte-level BPE tokenizer, trained locally with `tokenizers`, used as a compressor.

Raw bytes are mapped one-to-one onto characters (latin-1) so any byte string round-trips exactly;
the serialised form writes each token id as 2 big-endian bytes. The model reads the ids themselves,
so a vocabulary above 256 needs its own embeddings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import Field
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from kernelrl.proxy.compressors.base import COMPRESSORS, Compressor, CompressorOptions


class TokenizerOptions(CompressorOptions):
    vocab_size: int = Field(1024, ge=257, le=65536)
    min_frequency: int = Field(2, ge=1)


@COMPRESSORS.register("tokenizer", "bpe")
class TokenizerCompressor(Compressor):
    """BPE over bytes; `fit` must run before use."""

    Options = TokenizerOptions
    options: TokenizerOptions

    def __init__(self, options: TokenizerOptions) -> None:
        super().__init__(options)
        self.tokenizer: Tokenizer | None = None

    def fit(self, docs: Sequence[bytes], seed: int = 0) -> dict[str, Any]:
        if not docs:
            raise ValueError("tokenizer compressor: no training documents to learn BPE merges from")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=self.options.vocab_size,
            min_frequency=self.options.min_frequency,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=[],
            show_progress=False,
        )
        tok.train_from_iterator((d.decode("latin-1") for d in docs), trainer, length=len(docs))
        self.tokenizer = tok
        return {"vocab_size": tok.get_vocab_size()}

    def _tok(self) -> Tokenizer:
        if self.tokenizer is None:
            raise RuntimeError("tokenizer compressor used before fit(); train it on the training split first")
        return self.tokenizer

    @property
    def symbol_vocab(self) -> int:
        return self._tok().get_vocab_size()

    @property
    def bytes_per_symbol(self) -> int:
        return 2

    def symbols(self, data: bytes) -> np.ndarray:
        ids = self._tok().encode(data.decode("latin-1"), add_special_tokens=False).ids
        return np.asarray(ids, dtype=np.int64)

    def symbols_many(
        self, docs: Sequence[bytes], on_progress: Callable[[int], None] | None = None
    ) -> list[np.ndarray]:
        encs = self._tok().encode_batch([d.decode("latin-1") for d in docs], add_special_tokens=False)
        if on_progress is not None:
            on_progress(len(docs))
        return [np.asarray(e.ids, dtype=np.int64) for e in encs]

    def compress(self, data: bytes) -> bytes:
        return self.symbols(data).astype(">u2").tobytes()

    def decompress(self, blob: bytes) -> bytes:
        if len(blob) % 2:
            raise ValueError("tokenizer stream must hold 2 bytes per id; got an odd length")
        ids = np.frombuffer(blob, dtype=">u2").astype(np.int64).tolist()
        return self._tok().decode(ids, skip_special_tokens=False).encode("latin-1")

    def to_json(self) -> str:
        """The trained tokenizer, as `tokenizers` JSON."""
        return self._tok().to_str()
