"""Spot checks of timed calls: which elements of an output the judge reads (`SpotPlan`), and the read of
several calls' outputs at once (`read_spots`): one `process_vm_readv` per output leaf for all the calls
a request checks, against the expected values gathered the same way, so the judge's cost per request
does not grow with the number of checked calls."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from kernelrl.evaluate.exchange import dtype_from_name, read_remote_iov

SPOT_PIECES = 32  # random runs of elements read from each checked output
SPOT_RUN = 16  # elements per run
SMALL_OUTPUT_BYTES = 64 * 1024  # outputs up to this size are read whole


class SpotPlan:
    """Which elements of a timed call's output to read: SPOT_PIECES random runs, plus runs over the
    positions where the timing sets' expected outputs differ (`differ`, per output leaf), where an answer
    remembered from another set is wrong. Positions come from a generator seeded by the judge from the
    OS, which the candidate cannot see."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.differ: dict[int, torch.Tensor] = {}

    def starts(self, numel: int, run: int, leaf: int = 0) -> list[int]:
        """Run starts for one call's output leaf number `leaf` (of `numel` elements)."""
        return self.batch_starts(numel, run, 1, leaf)[0].tolist()

    def batch_starts(self, numel: int, run: int, calls: int, leaf: int = 0) -> torch.Tensor:
        """(calls x pieces) sorted run starts, drawn independently for each call; with differing positions
        known for this leaf, up to SPOT_PIECES more runs, each covering one of them."""
        g = self.generator
        parts = [torch.randint(0, numel - run + 1, (calls, SPOT_PIECES), generator=g)]
        differ = self.differ.get(leaf)
        if differ is not None and len(differ):
            if len(differ) <= SPOT_PIECES:
                picked = differ.expand(calls, -1)
            else:
                picked = differ[torch.randint(0, len(differ), (calls, SPOT_PIECES), generator=g)]
            shift = torch.randint(0, run, picked.shape, generator=g)
            parts.append((picked - shift).clamp(min=0, max=numel - run))
        return torch.cat(parts, dim=1).sort(dim=1).values


def differing_positions(expected: list[list[torch.Tensor]], cap: int = 1 << 16) -> dict[int, torch.Tensor]:
    """Per output leaf: flat positions (at most `cap`: beyond, a random sample) where the expected outputs of
    the timing sets are not all equal. `expected`: per set, its flat list of output tensors."""
    found: dict[int, torch.Tensor] = {}
    first = expected[0]
    for leaf, want in enumerate(first):
        flat = want.reshape(-1)
        mask = torch.zeros(flat.numel(), dtype=torch.bool)
        for other in expected[1:]:
            if leaf < len(other) and other[leaf].shape == want.shape:
                o = other[leaf].reshape(-1)
                mask |= _not_same_bits(o, flat) if o.dtype == flat.dtype else ~((o == flat) | (o.isnan() & flat.isnan()))
        positions = mask.nonzero().reshape(-1)
        if len(positions) > cap:  # `cap` draws with replacement, deduplicated: sorted, and a fraction of randperm's cost
            positions = positions[torch.randint(len(positions), (cap,)).unique()]
        found[leaf] = positions
    return found


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _not_same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where two flat tensors of one dtype differ bit for bit (one pass; NaNs alike but for their payloads,
    and -0.0 / +0.0, count as differing: more positions to check, never fewer)."""
    as_int = _SAME_WIDTH_INT.get(a.element_size())
    if as_int is None or a.is_complex() or a.dtype == torch.bool:
        return ~((a == b) | (a.isnan() & b.isnan())) if a.is_floating_point() else a != b
    return a.contiguous().view(as_int) != b.contiguous().view(as_int)


@dataclass
class LeafSpots:
    """One output leaf of several calls: what was read (calls x elements) and what the judge expects."""

    values: torch.Tensor
    expected: torch.Tensor


def read_spots(pid: int, described: list[list[Any]], expected: list[list[torch.Tensor]], spot: SpotPlan,
               max_bytes: int) -> list[LeafSpots] | None:
    """The spot-read values of each output leaf of several calls (`described`: each call's tensor leaves as
    the candidate described them; `expected`: that call's expected outputs), one read per leaf. None when
    anything is irregular (a leaf count, shape or dtype that differs from the expected one, a description
    that does not parse, a read that fails): the caller then checks call by call, which says what is wrong."""
    try:
        return [_read_leaf(pid, [leaves[j] for leaves in described], [want[j] for want in expected], spot, max_bytes, j)
                for j in range(len(expected[0]))] if _regular(described, expected) else None
    except (KeyError, TypeError, ValueError, OSError, IndexError):
        return None


def _regular(described: list[list[Any]], expected: list[list[torch.Tensor]]) -> bool:
    return bool(expected) and all(len(leaves) == len(want) for leaves, want in zip(described, expected, strict=True))


def _read_leaf(pid: int, leaves: list[Any], wants: list[torch.Tensor], spot: SpotPlan, max_bytes: int,
               leaf: int) -> LeafSpots:
    want = wants[0]
    shape, dtype, numel = list(want.shape), want.dtype, want.numel()
    addresses = []
    for desc in leaves:
        address, got_shape, dtype_name, nbytes = desc["tensor"]
        address, nbytes = int(address), int(nbytes)
        if [int(n) for n in got_shape] != shape or dtype_from_name(dtype_name) != dtype:
            raise ValueError("not the expected shape or dtype")
        if nbytes != numel * dtype.itemsize or nbytes > max_bytes or not 0 <= address < 2**62:
            raise ValueError("size does not match shape")
        addresses.append(address)
    calls, item = len(leaves), dtype.itemsize
    if not numel:
        return LeafSpots(torch.empty(calls, 0, dtype=dtype), torch.empty(calls, 0, dtype=dtype))
    base = torch.tensor(addresses, dtype=torch.int64)
    if numel * item <= SMALL_OUTPUT_BYTES:
        positions = None
        iov = torch.stack([base, torch.full_like(base, numel * item)], dim=1)
        values = torch.empty(calls, numel, dtype=dtype)
    else:
        run = min(SPOT_RUN, numel)
        starts = spot.batch_starts(numel, run, calls, leaf)
        iov = torch.stack([(base.unsqueeze(1) + starts * item).reshape(-1),
                           torch.full((starts.numel(),), run * item, dtype=torch.int64)], dim=1)
        positions = (starts.unsqueeze(2) + torch.arange(run)).reshape(calls, -1)
        values = torch.empty(calls, math.prod(positions.shape[1:]), dtype=dtype)
    read_remote_iov(pid, iov, values.data_ptr())
    return LeafSpots(values, _gather(wants, positions, values))


def _gather(wants: list[torch.Tensor], positions: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """The expected values at `positions` (all of them without), one row per call; calls that expect the
    same tensor (the same timing set) are gathered together."""
    out = torch.empty_like(like)
    groups: dict[int, tuple[torch.Tensor, list[int]]] = {}
    for i, want in enumerate(wants):
        groups.setdefault(id(want), (want, []))[1].append(i)
    for want, rows in groups.values():
        flat, index = want.reshape(-1), torch.tensor(rows)
        out[index] = flat.expand(len(rows), -1) if positions is None else flat[positions[index]]
    return out
