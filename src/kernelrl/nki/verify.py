"""The judge's side of an NKI evaluation: proof of work and cost from replayed traces, never from numbers
the candidate process reports.

The candidate process sends the traces of one forward (`collect_traces`). `verify_forward` resolves each
kernel's tensor arguments by content against tensors the judge trusts (the forward's inputs and the
model's state, which the judge made, and the outputs of earlier kernels as the judge replayed them),
replays every trace with the judge's own interpreter and cost model, and requires every output of the
forward to be, bit for bit, an output of a replayed kernel. A kernel argument the judge cannot name was
computed on the host; an output no replayed kernel made was too. With `alternate` (the trusted inputs
of another input set, index-aligned with `known`, and the candidate's outputs for that set), the same
traces must also reproduce those outputs: a trace whose instructions carry answers as constants, rather
than computing them, fails there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelrl.nki.cost import CostReport
from kernelrl.nki.interpret import hbm_array
from kernelrl.nki.trace import ReplayError, digest, replay


@dataclass
class Verdict:
    """What the judge learns from the traces: the trusted cost, or why the forward is not a kernel's work."""

    cost: CostReport = field(default_factory=CostReport)
    problem: str = ""  # empty when the forward's outputs are the replayed kernels' outputs

    @property
    def ok(self) -> bool:
        return not self.problem


def _replay_forward(
    traces: Sequence[dict[str, Any]], known: Sequence[Any], alternate: Sequence[Any] | None,
) -> tuple[list[np.ndarray], list[np.ndarray], CostReport]:
    """Replay each trace on arguments found by content among `known` and earlier outputs; with `alternate`
    (index-aligned with `known`) also on the counterpart tensors, in lockstep."""
    pool: dict[str, np.ndarray] = {}
    counterpart: dict[str, np.ndarray] = {}
    for number, value in enumerate(known):
        array = hbm_array(value)[0]
        key = digest(array)
        if key not in pool:
            pool[key] = array
            if alternate is not None:
                counterpart[key] = hbm_array(alternate[number])[0]
    produced: list[np.ndarray] = []
    produced_alt: list[np.ndarray] = []
    cost = CostReport()
    for call, trace in enumerate(traces):
        if not isinstance(trace, dict) or not isinstance(trace.get("args"), list):
            raise ReplayError(f"kernel call {call}: malformed trace")
        specs = [a for a in trace["args"] if isinstance(a, dict) and "tensor" in a]
        arrays = []
        for number, spec in enumerate(specs):
            found = pool.get(str(spec.get("digest")))
            if found is None:
                raise ReplayError(f"[host-compute] tensor argument {number} of kernel call {call} ({trace.get('kernel')}) "
                                  "is not a forward input, a parameter or an earlier kernel's output: it was computed "
                                  "on the host; pass the inputs to the kernel and compute there")
            if found.size != int(np.prod(spec.get("shape") or [0])):
                raise ReplayError(f"kernel call {call}: argument {number} does not have the recorded size")
            arrays.append(found)
        outputs, run = replay(trace, arrays)
        run.cost.kernels = 1
        cost.merge(run.cost)
        produced.extend(outputs)
        if alternate is not None:
            others, _ = replay(trace, [counterpart[digest(a)] for a in arrays])
            produced_alt.extend(others)
            for out, other in zip(outputs, others, strict=True):
                counterpart.setdefault(digest(out), other)
        for out in outputs:
            pool.setdefault(digest(out), out)
    return produced, produced_alt, cost


def _check_outputs(produced: list[np.ndarray], outputs: Sequence[Any], label: str) -> str:
    made = {digest(p) for p in produced}
    for number, value in enumerate(outputs):
        if digest(hbm_array(value)[0]) not in made:
            return (f"[host-compute] output {number} of forward{label} is not the output of any NKI kernel the judge "
                    "replayed from the instruction trace; return the HBM tensor your kernel stores its result into")
    return ""


def verify_forward(
    traces: Sequence[dict[str, Any]], known: Sequence[Any], outputs: Sequence[Any],
    alternate: tuple[Sequence[Any], Sequence[Any]] | None = None,
) -> Verdict:
    """Replay one forward's kernel traces on trusted tensors; see the module docstring."""
    if not traces:
        return Verdict(problem="[kernel-not-called] the forward ran no NKI kernel")
    try:
        if alternate is not None and len(alternate[0]) != len(known):
            raise ReplayError("the alternate input set does not match the known tensors")
        produced, again, cost = _replay_forward(traces, known, alternate[0] if alternate is not None else None)
        problem = _check_outputs(produced, outputs, "")
        if not problem and alternate is not None:
            problem = _check_outputs(again, alternate[1], " on another input set (the trace does not compute)")
    except ReplayError as exc:
        return Verdict(problem=str(exc))
    return Verdict(cost=cost, problem=problem)
