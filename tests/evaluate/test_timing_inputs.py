"""The judge's timing inputs and spot checks, without a candidate process: slots made as requests need
them, refilled so that every call changes its input set, shipped read-only; several calls' outputs read at
once from a process's memory (this one's). That read-only really holds against a process with the
arena's descriptor: tests/evaluate/test_sealed_inputs.py."""

from __future__ import annotations

import itertools
import os
import random
from typing import Any

import pytest
import torch

from kernelrl.evaluate import timing_inputs
from kernelrl.evaluate.exchange import dtype_name
from kernelrl.evaluate.spot_checks import SpotPlan, differing_positions, read_spots
from kernelrl.evaluate.timing_inputs import InputSlots, scatter_elements


class FakeProcess:
    """Stands in for the candidate process: 'shared' copies are plain clones."""

    def __init__(self) -> None:
        self.arenas: list[str] = []

    def send_inputs(self, name: str, sets: dict[str, list[Any]], read_only: bool = False) -> dict[str, list[Any]]:
        assert read_only, "timing slots must be shipped read-only"
        self.arenas.append(name)
        return {slot: [x.clone() if isinstance(x, torch.Tensor) else x for x in values] for slot, values in sets.items()}


def timing_sets(count: int) -> dict[str, list[Any]]:
    base = torch.randn(64)
    weight = torch.randn(8)  # shared by every set
    sets = {}
    for i in range(count):
        x = base.clone()
        x[i::7] = float(i)
        sets[f"s{i}"] = [x, weight]
    return sets


def test_slots_are_made_as_requests_need_them_and_every_call_changes_its_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing_inputs, "MIN_SLOT_SET_BYTES", 0)
    for seed, k in itertools.product(range(20), (1, 2, 5, 9, 16)):
        rng, process = random.Random(seed), FakeProcess()
        sets = timing_sets(2 + seed % 3)
        slots = InputSlots(process, sets, rng, on_device=False)  # type: ignore[arg-type]
        assert slots.count() == len(sets)
        warm = slots.order(3)
        slots.refill(warm)
        slots.grow(k + 1)
        assert slots.count() == max(len(sets), k + 1) and len(process.arenas) == (1 if k + 1 <= len(sets) else 2)
        held = [slots.previous]
        for _ in range(6):
            order = slots.order(k)
            assert len(set(order)) == k  # no slot repeats within a request
            held += [slots.content[slot] for slot in order]
            for slot in order:
                assert all(torch.equal(a, b) for a, b in zip(slots.shared[slot], sets[slots.content[slot]], strict=True))
            slots.refill(order)
        assert all(a != b for a, b in itertools.pairwise(held)), (seed, k, held)


def test_refilled_slots_hold_at_least_the_minimum_set_of_bytes() -> None:
    sets = {f"s{i}": [torch.randn(256, 1024)] for i in range(3)}  # 1 MiB each
    slots = InputSlots(FakeProcess(), sets, random.Random(0), on_device=False)  # type: ignore[arg-type]
    assert slots.count() == timing_inputs.MIN_SLOT_SET_BYTES // 2**20
    slots.grow(40)  # more than the budget allows
    assert slots.count() == slots.capacity == timing_inputs.SLOT_BYTES // 2**20


def test_scattered_sets_differ_in_a_few_secret_elements_and_refills_leave_exact_copies() -> None:
    generator = torch.Generator().manual_seed(0)
    base = [torch.randn(64, 2048), torch.randn(3), 4]
    sets, scattered = {"s0": base}, {"s0": [None, None, None]}
    for i in range(1, 4):
        sets[f"s{i}"], scattered[f"s{i}"] = scatter_elements(base, [torch.randn(64, 2048), torch.randn(3), 4], generator)
        first = sets[f"s{i}"][0]
        changed = (first != base[0]).reshape(-1).nonzero().reshape(-1)
        assert 1 <= len(changed) <= timing_inputs.SCATTERED_ELEMENTS
        assert set(changed.tolist()) <= set(scattered[f"s{i}"][0].tolist())  # every difference is where it says
        assert (first != base[0]).any(dim=1).sum() <= timing_inputs.SCATTERED_ELEMENTS  # not whole rows
        assert scattered[f"s{i}"][2] is None and sets[f"s{i}"][2] == 4
    slots = InputSlots(FakeProcess(), sets, random.Random(1), on_device=False, scattered=scattered)  # type: ignore[arg-type]
    slots.grow(6)
    for _ in range(10):
        order = slots.order(5)
        slots.refill(order)
        for slot, name in slots.content.items():
            assert all(torch.equal(a, b) for a, b in zip(slots.shared[slot][:2], sets[name][:2], strict=True))


def test_spot_reads_always_cover_where_the_sets_answers_differ() -> None:
    """A call answered with another set's (remembered) output is wrong only in a few elements; the spot
    plan reads each of them, so such an answer fails on every checked call."""
    base = torch.randn(256, 1024)
    other = base.clone()
    other.view(-1)[[5, 70_000, 262_000]] += 1.0
    expected = [[base], [other]]
    spot = SpotPlan(3)
    spot.differ = differing_positions(expected)
    assert spot.differ[0].tolist() == [5, 70_000, 262_000]
    for _ in range(20):
        described = [[describe(base)]]  # the candidate answers with set 0's output where set 1 was asked
        batch = read_spots(os.getpid(), described, [expected[1]], spot, 2**30)
        assert batch is not None and not torch.equal(batch[0].values, batch[0].expected)


def test_differing_positions_beyond_the_cap_are_a_sorted_random_sample_of_the_true_ones() -> None:
    """Sets that differ almost everywhere: the judge keeps at most `cap` of the positions, distinct, in
    order, all of them real differences, a large share of the cap, and a different sample each time."""
    base = torch.randn(512, 1024)
    other = base.clone()
    other.view(-1)[::3] += 1.0  # ~175k differing positions
    true = set(range(0, base.numel(), 3))
    cap = 1 << 14
    samples = [differing_positions([[base], [other]], cap=cap)[0] for _ in range(2)]
    for kept in samples:
        assert 0.8 * cap < kept.numel() <= cap
        assert bool((kept[1:] > kept[:-1]).all()), "positions must be distinct and sorted"
        assert set(kept.tolist()) <= true
    assert not torch.equal(samples[0], samples[1])


def test_refills_between_scattered_sets_write_only_where_they_differ_and_keep_every_slot_exact() -> None:
    """The judge's sets: the base (no positions of its own) and sets that differ from it in a few scattered
    elements. A refill writes only the elements two sets differ in, and every slot holds its set exactly."""
    base, other = [torch.randn(64, 1024)], [torch.randn(64, 1024)]
    sets, where = {"s0": base}, {"s0": [torch.empty(0, dtype=torch.long)]}
    for i in range(1, 3):
        sets[f"s{i}"], where[f"s{i}"] = scatter_elements(base, other, torch.Generator().manual_seed(i))
    slots = InputSlots(FakeProcess(), sets, random.Random(0), on_device=False, scattered=where)  # type: ignore[arg-type]
    assert all(p is not None and p.numel() <= 8 for pair in [slots._between("s0", "s1"), slots._between("s2", "s0")] for p in pair)
    for _ in range(30):
        order = slots.order(3)
        slots.refill(order)
        assert all(torch.equal(slots.shared[slot][0], sets[name][0]) for slot, name in slots.content.items())


def describe(t: torch.Tensor) -> dict[str, Any]:
    return {"tensor": [t.data_ptr(), list(t.shape), dtype_name(t.dtype), t.numel() * t.element_size()]}


def test_several_calls_are_spot_read_at_once() -> None:
    spot = SpotPlan(1)
    for shape in ((4, 100), (64, 1024)):  # read whole, and as runs of elements
        wants = [[torch.randn(shape)] for _ in range(3)]
        outputs = [wants[i % 3][0].clone() for i in range(5)]
        batch = read_spots(os.getpid(), [[describe(o)] for o in outputs], [wants[i % 3] for i in range(5)], spot, 2**30)
        assert batch is not None and len(batch) == 1
        assert batch[0].values.shape[0] == 5 and torch.equal(batch[0].values, batch[0].expected)
        outputs[3].fill_(0.5)  # one call wrong everywhere: every row of its read differs
        batch = read_spots(os.getpid(), [[describe(o)] for o in outputs], [wants[i % 3] for i in range(5)], spot, 2**30)
        assert batch is not None
        differs = (batch[0].values != batch[0].expected).any(dim=1).tolist()
        assert differs == [False, False, False, True, False]


def test_an_irregular_output_is_left_to_the_call_by_call_check() -> None:
    spot, want = SpotPlan(2), [torch.randn(16, 16)]
    good = want[0].clone()
    for odd in (want[0].double(), want[0].reshape(256), want[0][:8].clone()):
        assert read_spots(os.getpid(), [[describe(good)], [describe(odd)]], [want, want], spot, 2**30) is None
    assert read_spots(os.getpid(), [[describe(good), describe(good)]], [want], spot, 2**30) is None  # two outputs, one expected
    unmapped = {"tensor": [8, [16, 16], "float32", 1024]}
    assert read_spots(os.getpid(), [[unmapped]], [want], spot, 2**30) is None
