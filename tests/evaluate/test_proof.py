"""The judge's side of the replayed proof of work (`evaluate.proof`): records from the candidate are
bounded and rebuilt from checked fields, trusted bytes go only where a placement fits, and the Triton
replay runs in a confined server that redoes the recorded copies and fills, answers with bytes, in
order, and is stopped at its deadline."""

from __future__ import annotations

import importlib.util
import os
import time

import pytest
import torch

from kernelrl.evaluate.candidate_client import StageFailed
from kernelrl.evaluate.proof import ReplayServer, clean_launches, trusted_buffers

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


@triton.jit
def forever(x_ptr):
    i = 0
    while i >= 0:
        i += 1
'''


def spec(t: torch.Tensor, storage: int) -> dict:
    return {"storage": storage, "nbytes": t.numel() * t.element_size(), "offset": 0, "shape": list(t.shape),
            "stride": list(t.stride()), "dtype": str(t.dtype)}


def launch(kernel: str, **args: dict) -> dict:
    return {"kernel": kernel, "grid": [2], "args": args}


@pytest.mark.parametrize("launches", [
    "not a list", [launch("elsewhere")], [{**launch("double"), "grid": [1, 2, 3, 4]}],
    [{**launch("double"), "grid": [True]}], [launch("double", x_ptr={"tensor": {"storage": -1}})],
    [launch("double", x_ptr={"value": {"nested": [1]}})], [launch("double", x_ptr={"unsupported": "list"})],
    [launch("double")] * 5000, [{"data": "fill", "out": {"tensor": {}}, "value": 1.0}],
    [{"data": "move", "out": {"tensor": spec(torch.empty(2), 1)}}],
    [{"data": "fill", "out": {"tensor": spec(torch.empty(2), 1)}, "value": "answer"}],
])
def test_malformed_launch_records_are_refused(launches: object) -> None:
    with pytest.raises(StageFailed) as info:
        clean_launches(launches, {"double", "forever"})
    assert info.value.message.startswith("[kernel-proof]")


def test_trusted_bytes_go_only_where_a_placement_fits() -> None:
    x = torch.arange(8, dtype=torch.float32)
    fits = {**spec(x, 1000), "nbytes": 64, "offset": 4}
    buffers = trusted_buffers([(fits, x), ({**spec(x, 2000), "offset": 100}, x), (spec(x, 3000), x.double())])
    assert torch.equal(buffers[1000].view(torch.float32)[4:12], x) and not buffers[1000].view(torch.float32)[:4].any()
    assert not buffers[2000].any() and 3000 not in buffers  # out of its storage; another dtype
    with pytest.raises(StageFailed):  # a storage claimed far larger than the trusted tensors
        trusted_buffers([({**spec(x, 1000), "nbytes": 2**40}, x)])


@pytest.fixture()
def interpreted() -> object:
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    yield
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before


def test_the_confined_server_replays_in_order_and_is_stopped_at_its_deadline(interpreted: object) -> None:
    x, x2 = torch.randn(100), torch.randn(100)
    y_spec = spec(torch.empty(100), 2)
    launches = clean_launches([launch("double", x_ptr={"tensor": spec(x, 1)}, y_ptr={"tensor": y_spec},
                                      n={"value": 100}, BLOCK={"value": 64})], {"double"})
    server = ReplayServer(30.0)
    for values in (x, x2):
        server.submit(KERNELS, launches, trusted_buffers([(spec(x, 1), values)]), [y_spec])
    time.sleep(1.0)  # both answers are then likely read by one receive: the second must still be found
    (first,), (second,) = server.results()  # type: ignore[misc]
    assert torch.equal(first, x * 2.0) and torch.equal(second, x2 * 2.0)
    moved = spec(torch.empty(100), 3)  # a torch copy of x, then a fill of the copy's first half, then the kernel
    data = [{"data": "copy", "out": {"tensor": moved}, "src": {"tensor": spec(x, 1)}},
            {"data": "fill", "out": {"tensor": {**moved, "shape": [50]}}, "value": 0.5},
            launch("double", x_ptr={"tensor": moved}, y_ptr={"tensor": y_spec}, n={"value": 100}, BLOCK={"value": 64})]
    server = ReplayServer(30.0)
    server.submit(KERNELS, clean_launches(data, {"double"}), trusted_buffers([(spec(x, 1), x)]), [y_spec])
    ((out,),) = server.results()  # type: ignore[misc]
    assert torch.equal(out, torch.cat([torch.ones(50), x[50:] * 2.0]))
    stuck = ReplayServer(1.0)
    stuck.submit(KERNELS, clean_launches([launch("forever", x_ptr={"tensor": spec(x, 1)})], {"forever"}),
                 trusted_buffers([(spec(x, 1), x)]), [])
    assert "did not finish" in str(stuck.results()[0])
