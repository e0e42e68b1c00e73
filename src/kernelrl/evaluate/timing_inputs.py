"""The timing inputs the judge gives a candidate's timed calls: several input sets that differ in a few
scattered rows, copied into shared-memory slots that are refilled between requests, and the order of
calls over the slots; and the summary of the per-call times."""

from __future__ import annotations

import ctypes
import random
import statistics
from dataclasses import dataclass
from typing import Any

import torch

from kernelrl.evaluate.candidate_process import CandidateProcess
from kernelrl.evaluate.guards import mutated

MAX_SLOTS = 1000  # a request never repeats a slot, so k is at most the slot count
SLOT_BYTES = 32 * 2**20  # input copies shared with the candidate for timing
# Refilled slots hold at least this much (within SLOT_BYTES) even when k needs fewer: a timed call then
# reads inputs from beyond its core's L2 (a few MiB), as it did with the whole budget, not ones a refill or
# the last request left there; a loop-heavy honest kernel's share of the profile depends on it.
MIN_SLOT_SET_BYTES = 16 * 2**20
SPARSE_ROW_BYTES = 4096  # a refill writes only the rows two sets differ in where rows are at least this wide


class InputSlots:
    """Copies of the timing input sets in shared memory, one per slot; a timed request gives each call a
    slot of its own, and the slots a request used are refilled with another set's values before the
    next. An output cached by input address (or object) is then wrong on the next use of that slot,
    and within a request no slot repeats (k is capped at the slot count). `content[slot]` is the set a
    slot holds now.

    Refilled slots are made as requests need them (`grow`: k + 1, at least MIN_SLOT_SET_BYTES, at most
    SLOT_BYTES); each refill keeps the sets about equally held (so `changing_order` can always change
    the set from call to call) and checks, before it writes, that the slot still holds what the judge
    put there. Slots on a device are never refilled (the candidate's copies live there): all the budget
    allows are made at once."""

    def __init__(self, process: CandidateProcess, sets: dict[str, list[Any]], rng: random.Random, on_device: bool,
                 mixed: dict[str, torch.Tensor] | None = None) -> None:
        """`mixed[name]`: the leading rows in which set `name` differs from the others' base (sets made by
        `mix_rows`); a refill then writes only the rows two sets differ in, where rows are wide."""
        self.process, self.sets, self.names, self.rng = process, sets, list(sets), rng
        self.lead = lead_size(sets[self.names[0]])
        wide = any(_row_bytes(x) >= SPARSE_ROW_BYTES for x in sets[self.names[0]] if isinstance(x, torch.Tensor))
        self.mixed = mixed if wide else None
        self.between: dict[tuple[str, str], list[int] | None] = {}
        self.private = {name: to_cpu(values) for name, values in sets.items()}  # what a slot must hold
        in_bytes = max(1, sum(x.numel() * x.element_size() for x in sets[self.names[0]] if isinstance(x, torch.Tensor)))
        self.capacity = max(len(self.names), min(MAX_SLOTS, SLOT_BYTES // in_bytes))
        self.refillable = not on_device and len(self.names) > 1  # device copies live in the candidate
        self.content: dict[str, str] = {}
        self.shared: dict[str, list[Any]] = {}
        self.arenas = 0
        self.was_mutated = False
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
        self.shared |= self.process.send_inputs(f"slots{self.arenas}", {slot: self.sets[name] for slot, name in new.items()})
        self.arenas += 1
        self.content |= new

    def order(self, k: int) -> list[str]:
        """k slots for one request (`changing_order`), continuing from the last request's last call."""
        order = changing_order(self.content, k, self.rng, self.previous)
        if order:
            self.previous = self.content[order[-1]]
        return order

    def refill(self, used: list[str]) -> None:
        """Give each used slot the values of another set (one of those held least), in place, after
        checking that the slot still holds the set the judge put there."""
        if not self.refillable:
            return
        held = self._held()
        for slot in dict.fromkeys(used):
            old, target = self.content[slot], self.shared[slot]
            changed = mutated(self.private[old], target)
            self.was_mutated = self.was_mutated or changed
            others = [name for name in self.names if name != old]
            fewest = min(held[name] for name in others)
            new = self.rng.choice([name for name in others if held[name] == fewest])
            held[old], held[new] = held[old] - 1, held[new] + 1
            rows = None if changed else self._rows_between(old, new)
            for into, source, was in zip(target, self.sets[new], self.sets[old], strict=True):
                if not isinstance(into, torch.Tensor) or (source is was and not changed):  # sets share unmixed inputs
                    continue
                if rows is None or not _copy_rows(into, source, rows):
                    into.copy_(source)
            self.content[slot] = new

    def _rows_between(self, a: str, b: str) -> list[int] | None:
        """The leading rows in which sets `a` and `b` differ, in order (None: anywhere)."""
        if self.mixed is None:
            return None
        if (a, b) not in self.between:
            either = torch.zeros(self.lead, dtype=torch.bool)
            either[self.mixed[a]] = True
            either[self.mixed[b]] = True
            self.between[a, b] = either.nonzero().reshape(-1).tolist()
        return self.between[a, b]

    def mutated(self) -> bool:
        """Whether a call changed its inputs: a used slot differed (bitwise) from the set the judge had put
        there when it was refilled, or a slot differs now."""
        return self.was_mutated or any(mutated(self.private[name], self.shared[slot]) for slot, name in self.content.items())

    def _held(self) -> dict[str, int]:
        held = dict.fromkeys(self.names, 0)
        for name in self.content.values():
            held[name] += 1
        return held


def _row_bytes(t: torch.Tensor) -> int:
    return t.numel() // t.shape[0] * t.element_size() if t.dim() >= 2 and t.shape[0] else 0


def _copy_rows(into: torch.Tensor, source: torch.Tensor, rows: list[int]) -> bool:
    """Copy the given leading rows of `source` into `into` (runs of rows by memmove; torch's indexed
    copies are slower than copying everything); False where rows are narrow or the layouts differ."""
    width = _row_bytes(into)
    if width < SPARSE_ROW_BYTES or into.shape != source.shape or into.dtype != source.dtype or \
            into.device.type != "cpu" or source.device.type != "cpu" or not (into.is_contiguous() and source.is_contiguous()):
        return False
    to, of, i = into.data_ptr(), source.data_ptr(), 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and rows[j] == rows[j - 1] + 1:
            j += 1
        ctypes.memmove(to + rows[i] * width, of + rows[i] * width, (j - i) * width)
        i = j
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


MIXED_ROW_SHARES = (1 / 64, 0.25)


def mix_rows(base: list[Any], other: list[Any], generator: torch.Generator, share: float) -> tuple[list[Any], torch.Tensor]:
    """`base` with a random `share` of its rows (leading index; at least one) taken from `other`, an
    independent draw of the task's inputs, in every tensor input with the same leading size; and the rows
    taken. Sets that differ in a few scattered rows defeat a kernel that fingerprints a few input elements
    to reuse an earlier answer: it mistakes one set for another and is wrong in those rows, which the spot
    checks read. A batch of one takes `other` whole."""
    lead = lead_size(base)
    if lead <= 1:
        return other, torch.empty(0, dtype=torch.long)
    index = torch.randperm(lead, generator=generator)[: max(1, int(lead * share))]
    mixed = []
    for b, o in zip(base, other, strict=True):
        if isinstance(b, torch.Tensor) and isinstance(o, torch.Tensor) and b.dim() >= 1 and b.shape[0] == lead \
                and o.shape == b.shape:
            b = b.clone()
            b[index.to(b.device)] = o[index.to(o.device)]
        mixed.append(b)
    return mixed, index


def lead_size(inputs: list[Any]) -> int:
    """The leading size of the first tensor input (1 without one)."""
    return next((x.shape[0] for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 1), 1)


def to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, list | tuple):
        return type(value)(to_cpu(v) for v in value)
    return value
