"""Reuse of prefilled prompts: the KV rows and next-token logits of a context, kept LRU.

The n samples of a GRPO/CoPRIS group share one prompt; with this cache the prompt is prefilled
once and later samples of the group start from a copy of its KV rows, without a forward pass.
Entries belong to one policy version: the engine clears the cache when the weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from kernelrl.generation.kv_cache import BatchKVCache, new_cache


@dataclass(frozen=True)
class PrefixEntry:
    """One context's prefill: keys/values per layer [H, L, D] and next-token logits [V]."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    logits: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[1])


def entry_from_row(kv: BatchKVCache, row: int, length: int, logits: torch.Tensor) -> PrefixEntry:
    """Copy the last `length` columns of `row` of a prefilled batch (its real tokens)."""
    keys = tuple(layer.keys[row, :, -length:].clone() for layer in kv.cache.layers)
    values = tuple(layer.values[row, :, -length:].clone() for layer in kv.cache.layers)
    return PrefixEntry(keys, values, logits.clone())


def batch_from_entries(entries: list[PrefixEntry]) -> tuple[BatchKVCache, torch.Tensor]:
    """A left-padded BatchKVCache with one row per entry, and the entries' logits [B, V]."""
    width = max(e.length for e in entries)
    first = entries[0]
    mask = torch.zeros(len(entries), width, dtype=torch.long, device=first.logits.device)
    for i, e in enumerate(entries):
        mask[i, width - e.length :] = 1
    cache = new_cache()
    for layer in range(len(first.keys)):
        k = first.keys[layer].new_zeros(len(entries), *first.keys[layer].shape[:1], width, first.keys[layer].shape[-1])
        v = torch.zeros_like(k)
        for i, e in enumerate(entries):
            k[i, :, width - e.length :] = e.keys[layer]
            v[i, :, width - e.length :] = e.values[layer]
        cache.update(k, v, layer)
    return BatchKVCache(cache, mask), torch.stack([e.logits for e in entries])


class PrefixCache:
    """LRU map from a token context (tuple of ids) to its `PrefixEntry`, bounded in tokens."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], PrefixEntry] = OrderedDict()
        self._tokens = 0

    def get(self, key: tuple[int, ...]) -> PrefixEntry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: tuple[int, ...], entry: PrefixEntry) -> None:
        if entry.length > self.max_tokens or key in self._entries:
            return
        self._entries[key] = entry
        self._tokens += entry.length
        while self._tokens > self.max_tokens:
            _, old = self._entries.popitem(last=False)
            self._tokens -= old.length

    def clear(self) -> None:
        self._entries.clear()
        self._tokens = 0

    def __len__(self) -> int:
        return len(self._entries)
