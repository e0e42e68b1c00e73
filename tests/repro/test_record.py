"""A results record names the machine its seeded numbers came from."""

from __future__ import annotations

import json

import torch

from kernelrl.repro.record import new_record


def test_a_record_names_the_vector_kernels_torch_picked_on_its_machine() -> None:
    """Seeded runs differ between machines whose torch picks other vector kernels (AVX2 against AVX512), so a
    record carries that next to its revision, in JSON."""
    record = json.loads(json.dumps(new_record("example", {"seed": 0})))
    assert record["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["machine"]["cores"] >= 1 and record["machine"]["torch"] == torch.__version__
