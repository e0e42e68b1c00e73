"""The timing inputs the judge gives a candidate's timed calls: several input sets drawn from a secret seed
that differ from each other in a few elements at secret scattered positions, copied into shared-memory
slots that are refilled between requests, and the order of calls over the slots; and the summary of the
per-call times."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Any

import torch

from kernelrl.evaluate.candidate_client import CandidateProcess

MAX_SLOTS = 1000  # a request never repeats a slot, so k is at most the slot count
SLOT_BYTES = 32 * 2**20  # input copies shared with the candidate for timing
# Refilled slots hold at least this much (within SLOT_BYTES) even when k needs fewer: a timed call then
# reads inputs from beyond its core's L2 (1-2 MiB), as it did with the whole budget, not ones a refill or
# the last request left there; a loop-heavy honest kernel's share of the profile depends on it. Writing
# the slots is most of the judge's own cost for a small kernel (~0.7 ms per MiB), so no more than that.
MIN_SLOT_SET_BYTES = 8 * 2**20
SCATTERED_ELEMENTS = 4  # elements of each input tensor in which a timing set differs from the first one


class InputSlots:
    """Copies of the timing input sets in shared memory, one per slot; a timed request gives each call a
    slot of its own, and the slots a request used are refilled with another set's values before the
    next. An output cached by input address (or object) is then wrong on the next use of that slot,
    and within a request no slot repeats (k is capped at the slot count). `content[slot]` is the set a
    slot holds now.

    Refilled slots are made as requests need them (`grow`: k + 1, at least MIN_SLOT_SET_BYTES, at most
    SLOT_BYTES); each refill keeps the sets about equally held (so `changing_order` can always change
    the set from call to call) and writes only the elements two sets differ in. The slots are read-only
    to the candidate (sealed arenas, `exchange.Arena`): a slot holds what the judge wrote there, with no
    comparison needed, and a call that writes its inputs faults. Slots on a device are never refilled
    (the candidate's copies live there): all the budget allows are made at once."""

    def __init__(self, process: CandidateProcess, sets: dict[str, list[Any]], rng: random.Random, on_device: bool,
                 scattered: dict[str, list[torch.Tensor | None]] | None = None) -> None:
        """`scattered[name][i]`: the flat positions at which input `i` of set `name` differs from the same
        base as every other set's (sets made by `scatter_elements`; None: anywhere); a refill then writes
        only the elements two sets differ in."""
        self.process, self.sets, self.names, self.rng = process, sets, list(sets), rng
        self.scattered = scattered
        self.between: dict[tuple[str, str], list[torch.Tensor | None]] = {}
        in_bytes = max(1, sum(x.numel() * x.element_size() for x in sets[self.names[0]] if isinstance(x, torch.Tensor)))
        self.capacity = max(len(self.names), min(MAX_SLOTS, SLOT_BYTES // in_bytes))
        self.refillable = not on_device and len(self.names) > 1  # device copies live in the candidate
        self.content: dict[str, str] = {}
        self.shared: dict[str, list[Any]] = {}
        self.arenas = 0
        self.previous = ""  # the set the last call held
        least = max(len(self.names), min(self.capacity, MIN_SLOT_SET_BYTES // in_bytes))
        self.grow(least if self.refillable else self.capacity)

    def count(self) -> int:
        return len(self.content)

    def grow(self, count: int) -> None:
        """At least `count` slots (at most `capacity`); new slots hold the sets held least."""
        count = min(count, self.capacity)
        if count <= len(self.content):
            return
        held = self._held()
        new = {}
        for j in range(len(self.content), count):
            name = min(self.names, key=held.__getitem__)
            held[name] += 1
            new[f"x{j}"] = name
        self.shared |= self.process.send_inputs(f"slots{self.arenas}", {slot: self.sets[name] for slot, name in new.items()},
                                                read_only=True)
        self.arenas += 1
        self.content |= new

    def order(self, k: int) -> list[str]:
        """k slots for one request (`changing_order`), continuing from the last request's last call."""
        order = changing_order(self.content, k, self.rng, self.previous)
        if order:
            self.previous = self.content[order[-1]]
        return order

    def refill(self, used: list[str]) -> None:
        """Give each used slot the values of another set (one of those held least), in place (the slot still
        holds the set the judge put there: the candidate cannot write it)."""
        if not self.refillable:
            return
        held = self._held()
        for slot in dict.fromkeys(used):
            old, target = self.content[slot], self.shared[slot]
            others = [name for name in self.names if name != old]
            fewest = min(held[name] for name in others)
            new = self.rng.choice([name for name in others if held[name] == fewest])
            held[old], held[new] = held[old] - 1, held[new] + 1
            between = self._between(old, new)
            for i, (into, source, was) in enumerate(zip(target, self.sets[new], self.sets[old], strict=True)):
                if not isinstance(into, torch.Tensor) or source is was:  # sets share this input
                    continue
                if between[i] is None or not _copy_elements(into, source, between[i]):
                    into.copy_(source)
            self.content[slot] = new

    def _between(self, a: str, b: str) -> list[torch.Tensor | None]:
        """Per input: the flat positions in which sets `a` and `b` can differ (None: anywhere)."""
        if (a, b) not in self.between:
            count = len(self.sets[a])
            if self.scattered is None:
                self.between[a, b] = [None] * count
            else:
                pa, pb = self.scattered[a], self.scattered[b]
                self.between[a, b] = [None if pa[i] is None or pb[i] is None else torch.cat([pa[i], pb[i]]).unique()
                                      for i in range(count)]
        return self.between[a, b]

    def _held(self) -> dict[str, int]:
        held = dict.fromkeys(self.names, 0)
        for name in self.content.values():
            held[name] += 1
        return held


def _copy_elements(into: torch.Tensor, source: torch.Tensor, positions: torch.Tensor) -> bool:
    """Copy the elements at flat `positions` of `source` into `into`; False where the layouts differ."""
    if into.shape != source.shape or into.dtype != source.dtype or into.device != source.device or \
            not (into.is_contiguous() and source.is_contiguous()):
        return False
    index = positions.to(into.device)
    into.view(-1)[index] = source.reshape(-1)[index]
    return True


def changing_order(content: dict[str, str], k: int, rng: random.Random, previous: str = "") -> list[str]:
    """k of the slots in `content` (slot -> the set it holds), distinct while there are enough, in random
    order, where no call holds the same set as the call before it (the first: `previous`) while a slot
    with another set is free. Every call then changes the inputs: an answer reused because the input
    looks or is unchanged (a few probe elements compared, or all of it) is wrong on any call, not only
    after the few set changes a random order would have."""
    order: list[str] = []
    while len(order) < k:
        free: dict[str, list[str]] = {}
        for slot in rng.sample(list(content), len(content)):
            free.setdefault(content[slot], []).append(slot)
        for _ in range(min(len(content), k - len(order))):
            left = sum(len(slots) for slots in free.values())
            others = [name for name, slots in free.items() if slots and name != previous]
            crowded = [name for name in others if 2 * len(free[name]) > left]  # else its slots end up in a row
            name = crowded[0] if crowded else rng.choice(others) if others else previous
            order.append(free[name].pop())
            previous = name
    return order


@dataclass
class Measurement:
    median_ms: float
    spread_ms: float  # interquartile range
    trials: int


def summarise(samples_ms: list[float]) -> Measurement:
    samples = sorted(samples_ms)
    if len(samples) >= 4:
        quartiles = statistics.quantiles(samples, n=4)
        spread = quartiles[2] - quartiles[0]
    else:
        spread = samples[-1] - samples[0]
    return Measurement(statistics.median(samples), spread, len(samples))


def scatter_elements(base: list[Any], other: list[Any], generator: torch.Generator,
                     count: int = SCATTERED_ELEMENTS) -> tuple[list[Any], list[torch.Tensor | None]]:
    """`base` with `count` elements at random flat positions (drawn from the judge's secret `generator`) of
    every tensor input taken from `other`, an independent draw of the task's inputs; and, per input, the
    positions taken (None for an input left alone). Sets that differ in a few elements at positions the
    candidate cannot know look alike to any few probes: telling them apart takes reading (almost) all of
    an input, and an answer remembered from another set is wrong where the spot checks look."""
    mixed: list[Any] = []
    positions: list[torch.Tensor | None] = []
    for b, o in zip(base, other, strict=True):
        if not (isinstance(b, torch.Tensor) and isinstance(o, torch.Tensor) and o.shape == b.shape and b.numel()):
            mixed.append(b)
            positions.append(None)
            continue
        index = torch.randint(0, b.numel(), (min(count, b.numel()),), generator=generator).unique()
        b = b.clone()
        b.view(-1)[index.to(b.device)] = o.reshape(-1)[index.to(o.device)]
        mixed.append(b)
        positions.append(index)
    return mixed, positions


def to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, list | tuple):
        return type(value)(to_cpu(v) for v in value)
    return value
