"""Mixing raw and compressed views into training sequences (proxy compression).

Id layout: 0..255 raw bytes, then four sentinels `<raw>`, `</raw>`, `<compressed>`, `</compressed>`,
then, only when compressed symbols have their own embeddings, the compressed symbols.
Each training document is, independently, shown compressed with probability `p_compressed` and raw
otherwise; early in training a document is instead shown as a translation pair (both views in one
context, random order) with a probability that ramps linearly down to zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from kernelrl.config_system import ConfigModel
from kernelrl.proxy.model import N_BYTES

RAW_OPEN, RAW_CLOSE, COMP_OPEN, COMP_CLOSE = N_BYTES, N_BYTES + 1, N_BYTES + 2, N_BYTES + 3
N_SENTINELS = 4
SENTINELS = {RAW_OPEN: "<raw>", RAW_CLOSE: "</raw>", COMP_OPEN: "<compressed>", COMP_CLOSE: "</compressed>"}
EmbeddingMode = Literal["auto", "shared", "separate"]


class MixConfig(ConfigModel):
    """View choice per document."""

    p_compressed: float = Field(0.9, ge=0.0, le=1.0)
    translation_start: float = Field(0.5, ge=0.0, le=1.0, description="P(pair) at the first step")
    translation_until: float = Field(0.25, ge=0.0, le=1.0, description="fraction of training when P(pair) hits 0")

    def translation_prob(self, progress: float) -> float:
        """P(translation pair) at training progress in [0, 1]: linear ramp from `translation_start` to 0."""
        if self.translation_until <= 0.0:
            return 0.0
        return self.translation_start * max(0.0, 1.0 - progress / self.translation_until)


@dataclass(frozen=True)
class VocabLayout:
    """Where compressed symbols live in the model's id space."""

    symbol_vocab: int = 0
    separate: bool = False

    @property
    def offset(self) -> int:
        """Id of compressed symbol 0."""
        return N_BYTES + N_SENTINELS if self.separate else 0

    @property
    def vocab_size(self) -> int:
        return N_BYTES + N_SENTINELS + (self.symbol_vocab if self.separate else 0)


def make_layout(symbol_vocab: int, mode: EmbeddingMode) -> VocabLayout:
    """Separate embeddings when asked, or (`auto`) when the symbols do not fit in 256 byte ids."""
    if mode == "shared" and symbol_vocab > N_BYTES:
        raise ValueError(
            f"{symbol_vocab} compressed symbols cannot share the 256 byte embeddings; "
            "serialise them to bytes first or use embeddings='separate'"
        )
    return VocabLayout(symbol_vocab, mode == "separate" or (mode == "auto" and symbol_vocab > N_BYTES))


def wrap_raw(raw: bytes | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`<raw> bytes </raw>` -> ids [n + 2] int64 and is_raw [n + 2] bool (True on the bytes)."""
    body = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, bytes) else raw
    ids = np.concatenate(([RAW_OPEN], body.astype(np.int64), [RAW_CLOSE]))
    is_raw = np.zeros(len(ids), dtype=bool)
    is_raw[1:-1] = True
    return ids, is_raw


def wrap_compressed(symbols: np.ndarray, layout: VocabLayout) -> tuple[np.ndarray, np.ndarray]:
    """`<compressed> symbols </compressed>` -> ids [n + 2] and is_raw [n + 2] (all False)."""
    if len(symbols) and (symbols.min() < 0 or symbols.max() >= max(layout.symbol_vocab, 1)):
        raise ValueError(f"compressed symbol out of range [0, {layout.symbol_vocab})")
    ids = np.concatenate(([COMP_OPEN], symbols.astype(np.int64) + layout.offset, [COMP_CLOSE]))
    return ids, np.zeros(len(ids), dtype=bool)


@dataclass
class MixStats:
    """What a stream has produced so far."""

    raw_docs: int = 0
    compressed_docs: int = 0
    pair_docs: int = 0
    raw_tokens: int = 0
    compressed_tokens: int = 0
    sentinel_tokens: int = 0
    source_bytes: int = 0  # raw bytes of every document shown, in whatever view
    epochs: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class MixedStream:
    """Endless packed stream of documents, each in a randomly chosen view.

    `compressed` is None for the byte-only baseline (every document raw).
    """

    raw_docs: Sequence[bytes]
    compressed: Sequence[np.ndarray] | None
    layout: VocabLayout
    mix: MixConfig
    seed: int = 0
    stats: MixStats = field(default_factory=MixStats)

    def __post_init__(self) -> None:
        if not self.raw_docs:
            raise ValueError("empty corpus: no training documents to stream")
        if self.compressed is not None and len(self.compressed) != len(self.raw_docs):
            raise ValueError("need one compressed view per raw document")
        self.rng = np.random.default_rng(self.seed)
        self._order: list[int] = []
        self._served = 0
        self._ids: list[np.ndarray] = []
        self._raw: list[np.ndarray] = []
        self._buffered = 0

    def choose_view(self, progress: float) -> Literal["raw", "compressed", "pair"]:
        """Draw the view of the next document."""
        if self.compressed is None:
            return "raw"
        if self.rng.random() < self.mix.translation_prob(progress):
            return "pair"
        return "compressed" if self.rng.random() < self.mix.p_compressed else "raw"

    def render(self, index: int, view: str) -> tuple[np.ndarray, np.ndarray]:
        """Ids and raw-byte mask of document `index` in `view` ("pair": both, random order)."""
        raw = wrap_raw(self.raw_docs[index])
        if view == "raw":
            return raw
        assert self.compressed is not None
        comp = wrap_compressed(self.compressed[index], self.layout)
        if view == "compressed":
            return comp
        first, second = (raw, comp) if self.rng.random() < 0.5 else (comp, raw)
        return np.concatenate((first[0], second[0])), np.concatenate((first[1], second[1]))

    def _next_index(self) -> int:
        if not self._order:
            self._order = self.rng.permutation(len(self.raw_docs)).tolist()
        self._served += 1
        self.stats.epochs = self._served / len(self.raw_docs)
        return self._order.pop()

    def _push(self, progress: float) -> None:
        index = self._next_index()
        view = self.choose_view(progress)
        ids, is_raw = self.render(index, view)
        s = self.stats
        s.raw_docs += view == "raw"
        s.compressed_docs += view == "compressed"
        s.pair_docs += view == "pair"
        s.source_bytes += len(self.raw_docs[index])
        n_raw = int(is_raw.sum())
        n_sent = 2 if view != "pair" else 4
        s.raw_tokens += n_raw
        s.sentinel_tokens += n_sent
        s.compressed_tokens += len(ids) - n_raw - n_sent
        self._ids.append(ids)
        self._raw.append(is_raw)
        self._buffered += len(ids)

    def next_batch(self, batch_size: int, seq_len: int, progress: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Next [B, T + 1] ids and raw-byte mask; consecutive rows continue the packed stream."""
        need = batch_size * (seq_len + 1)
        while self._buffered < need:
            self._push(progress)
        ids, is_raw = np.concatenate(self._ids), np.concatenate(self._raw)
        self._ids, self._raw = [ids[need:]], [is_raw[need:]]
        self._buffered = len(ids) - need
        shape = (batch_size, seq_len + 1)
        return torch.from_numpy(ids[:need].reshape(shape)), torch.from_numpy(is_raw[:need].reshape(shape))


def pack_rows(ids: np.ndarray, counted: np.ndarray, seq_len: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut one id stream [N] into rows [R, T + 1] with stride T, so every id after the first is a target
    exactly once; the last row is padded with `pad_id` (not counted). Returns ids and counted [R, T + 1]."""
    if len(ids) < 2:
        raise ValueError(f"evaluation text of {len(ids)} ids has nothing to predict")
    rows = -(-(len(ids) - 1) // seq_len)
    pad = rows * seq_len + 1 - len(ids)
    ids = np.concatenate((ids, np.full(pad, pad_id, dtype=np.int64)))
    counted = np.concatenate((counted, np.zeros(pad, dtype=bool)))
    index = np.arange(rows)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return torch.from_numpy(ids[index]), torch.from_numpy(counted[index])


def pack_eval(raw_docs: Sequence[bytes], seq_len: int, pad_tail: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Validation rows: raw-wrapped documents back to back, rows of T + 1 ids with stride T so every
    id after the first is a target exactly once. Returns ids [R, T + 1] and is_raw [R, T + 1].

    Without `pad_tail` the ids after the last full row are dropped; with it they end a padded row.
    """
    pieces = [wrap_raw(d) for d in raw_docs]
    if not pieces:
        raise ValueError("empty corpus: no validation documents")
    ids = np.concatenate([p[0] for p in pieces])
    is_raw = np.concatenate([p[1] for p in pieces])
    if pad_tail:
        return pack_rows(ids, is_raw, seq_len, RAW_CLOSE)
    rows = (len(ids) - 1) // seq_len
    if rows < 1:
        raise ValueError(f"validation text ({len(ids)} ids) is shorter than one sequence of {seq_len + 1}")
    index = np.arange(rows)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return torch.from_numpy(ids[index]), torch.from_numpy(is_raw[index])


def pack_eval_symbols(
    symbols: Sequence[np.ndarray], layout: VocabLayout, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validation rows of compressed-wrapped documents (every symbol once, padded tail), for a model
    trained on symbols only. Returns ids [R, T + 1] and is_symbol [R, T + 1] (sentinels not counted)."""
    if not symbols:
        raise ValueError("empty corpus: no validation documents")
    ids = np.concatenate([wrap_compressed(s, layout)[0] for s in symbols])
    is_symbol = (ids >= layout.offset) & ((ids < N_BYTES) | (ids >= N_BYTES + N_SENTINELS))
    return pack_rows(ids, is_symbol, seq_len, COMP_CLOSE)
