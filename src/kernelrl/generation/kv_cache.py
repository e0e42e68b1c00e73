"""A batch of left-aligned KV caches whose rows can join and leave between decode steps.

Rows are right-aligned in the key/value column axis: row b's real tokens occupy the last
`lengths[b]` columns and the columns before them are masked padding. A joining batch is
left-padded to the common width; when rows leave, columns that are padding for every remaining
row are dropped, so the padding is bounded by the length spread of the rows in flight, not by the
longest sequence ever seen.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class BufferedLayer(DynamicLayer):
    """A DynamicLayer that appends into spare columns of a larger buffer.

    `DynamicLayer.update` concatenates, copying the whole [B, H, T, D] cache every decode step;
    here a step writes one column in place and the buffer grows geometrically, so appending costs
    amortised O(new tokens). `keys`/`values` stay views of the buffer's first T columns; if
    someone assigns them directly, the next update moves them into a fresh buffer.
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()
        need = n + key_states.shape[-2]
        if n == 0:
            self._kbuf, self._vbuf = self._alloc(key_states, need), self._alloc(value_states, need)
        elif not self._owns() or need > self._kbuf.shape[2]:  # type: ignore[union-attr]
            self._kbuf = self._alloc(self.keys, need, copy=True)  # type: ignore[arg-type]
            self._vbuf = self._alloc(self.values, need, copy=True)  # type: ignore[arg-type]
        assert self._kbuf is not None and self._vbuf is not None
        self._kbuf[:, :, n:need].copy_(key_states)
        self._vbuf[:, :, n:need].copy_(value_states)
        self.keys, self.values = self._kbuf[:, :, :need], self._vbuf[:, :, :need]
        return self.keys, self.values

    def drop_left(self, start: int) -> None:
        """Drop the first `start` columns without copying."""
        owned = self._owns()
        self.keys, self.values = self.keys[:, :, start:], self.values[:, :, start:]  # type: ignore[index]
        if owned:
            self._kbuf, self._vbuf = self._kbuf[:, :, start:], self._vbuf[:, :, start:]  # type: ignore[index]

    def _owns(self) -> bool:
        k, v, kb, vb = self.keys, self.values, self._kbuf, self._vbuf
        return (
            k is not None and v is not None and kb is not None and vb is not None and k.dim() == 4
            and k.data_ptr() == kb.data_ptr() and v.data_ptr() == vb.data_ptr()
            and k.shape[:2] == kb.shape[:2] and k.stride() == kb.stride()
        )

    @staticmethod
    def _alloc(like: torch.Tensor, need: int, copy: bool = False) -> torch.Tensor:
        b, h, n, d = like.shape
        buf = like.new_empty(b, h, max(need + 16, int(need * 1.5)), d)
        if copy:
            buf[:, :, :n].copy_(like)
        return buf


def cache_kwarg(model: torch.nn.Module) -> str:
    """The keyword a model's forward takes its KV cache by: `cache` from transformers 5.2x on (where
    `past_key_values` warns that it is deprecated), `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def new_cache() -> DynamicCache:
    """An empty DynamicCache whose layers are `BufferedLayer`s."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = BufferedLayer
    return cache


class BatchKVCache:
    """A `transformers` DynamicCache plus its [B, T] attention mask.

    cache layers hold keys/values [B, H, T, D]; mask: [B, T] long (1 = real token).
    """

    def __init__(self, cache: DynamicCache, mask: torch.Tensor) -> None:
        _check_layers(cache)
        self.cache = cache
        self.mask = mask

    @property
    def batch_size(self) -> int:
        return int(self.mask.shape[0])

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def append_step(self) -> torch.Tensor:
        """Extend the mask by one real column for the token about to be fed; returns the new mask."""
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.batch_size, 1)], dim=1)
        return self.mask

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` ([R] long), in that order, then drop all-padding leading columns."""
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)
        self.mask = self.mask.index_select(0, rows)
        self.compact()

    def compact(self) -> None:
        """Drop leading columns that are padding in every row."""
        if self.batch_size == 0:
            return
        real_cols = self.mask.any(dim=0).nonzero()
        start = int(real_cols[0]) if len(real_cols) else self.width
        if start == 0:
            return
        for layer in self.cache.layers:
            if isinstance(layer, BufferedLayer):
                layer.drop_left(start)
            else:
                layer.keys = layer.keys[:, :, start:]
                layer.values = layer.values[:, :, start:]
        self.mask = self.mask[:, start:]

    def extend(self, other: BatchKVCache) -> None:
        """Append `other`'s rows after this cache's rows, left-padding the narrower one."""
        if len(self.cache.layers) != len(other.cache.layers):
            raise ValueError("caches have different numbers of layers")
        width = max(self.width, other.width)
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            mine.keys = torch.cat([_pad_left(mine.keys, width), _pad_left(theirs.keys, width)], dim=0)
            mine.values = torch.cat([_pad_left(mine.values, width), _pad_left(theirs.values, width)], dim=0)
        self.mask = torch.cat([_pad_left(self.mask, width), _pad_left(other.mask, width)], dim=0)

    def fill(self, slots: list[int], other: BatchKVCache, rows: list[int]) -> None:
        """Overwrite rows `slots` with rows `rows` of `other`, right-aligned, in place.

        The overwritten rows' older columns stay in memory but are masked out. Widens this
        cache first if `other` is wider.
        """
        if other.width > self.width:
            self.widen(other.width)
        start = self.width - other.width
        dst = torch.tensor(slots, device=self.mask.device)
        src = torch.tensor(rows, device=self.mask.device)
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            mine.keys[dst, :, start:] = theirs.keys.index_select(0, src)
            mine.values[dst, :, start:] = theirs.values.index_select(0, src)
        self.mask[dst] = 0
        self.mask[dst, start:] = other.mask.index_select(0, src)

    def widen(self, width: int) -> None:
        """Left-pad every row to `width` columns."""
        for layer in self.cache.layers:
            layer.keys, layer.values = _pad_left(layer.keys, width), _pad_left(layer.values, width)
        self.mask = _pad_left(self.mask, width)

    def padding_fraction(self) -> float:
        """Fraction of key/value columns (over all rows) that are padding."""
        return 1.0 - float(self.mask.float().mean()) if self.mask.numel() else 0.0


def _pad_left(x: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad the column axis (dim 2 for [B, H, T, D], dim 1 for a [B, T] mask) on the left."""
    axis = 2 if x.dim() == 4 else 1
    missing = width - x.shape[axis]
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[axis] = missing
    return torch.cat([x.new_zeros(shape), x], dim=axis)


def _check_layers(cache: DynamicCache) -> None:
    for i, layer in enumerate(cache.layers):
        if type(layer) not in (DynamicLayer, BufferedLayer) or layer.keys is None or layer.keys.dim() != 4:
            raise NotImplementedError(
                f"the engine needs a full-attention KV cache ([B, H, T, D] per layer); layer {i} is "
                f"{type(layer).__name__}. Models with sliding-window, linear or state-space layers "
                "are not supported by the continuous-batching engine."
            )
