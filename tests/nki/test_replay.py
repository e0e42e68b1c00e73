"""No host escape: tiles are opaque, the candidate's numpy is a facade, and the judge's replay of the
instruction trace (its own interpreter and cost model) is what proves the work and prices it."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch

from kernelrl.nki import NkiCompileError, load_candidate, nki_modules, run_kernel
from kernelrl.nki.interpret import collect_traces
from kernelrl.nki.trace import ReplayError, replay
from kernelrl.nki.verify import verify_forward

SOURCE = textwrap.dedent('''
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def relu(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(x.shape[1])[None, :]
        for t in nl.affine_range((x.shape[0] + 127) // 128):
            r = t * 128 + i_p
            nl.store(out[r, i_f], value=nl.relu(nl.load(x[r, i_f], mask=r < x.shape[0])), mask=r < x.shape[0])
        return out


    @nki.jit
    def constant(x, values):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.static_range(x.shape[0]):
            for j in nl.static_range(x.shape[1]):
                nl.store(out[i:i + 1, j:j + 1], value=nl.full((1, 1), values[i][j], nl.float32))
        return out
''')


@pytest.fixture(scope="module")
def ns() -> dict:
    return load_candidate(SOURCE)


def test_replay_reproduces_outputs_and_cost_from_json(ns: dict) -> None:
    x = torch.randn(200, 16)
    with collect_traces() as traces:
        result = run_kernel(ns["relu"], x)
    trace = json.loads(json.dumps(traces[0]))
    outputs, run = replay(trace, [x.numpy()])
    np.testing.assert_array_equal(outputs[0], result.outputs.numpy())
    assert run.cost.to_dict() == result.cost.to_dict() | {"kernels": 0}
    verdict = verify_forward(traces, [x], [result.outputs])
    assert verdict.ok and verdict.cost.estimated_total_us == pytest.approx(result.cost.estimated_total_us)
    x2 = torch.randn(200, 16)
    assert verify_forward(traces, [x], [result.outputs], alternate=([x2], [torch.relu(x2)])).ok


def test_forged_traces_and_host_outputs_are_caught(ns: dict) -> None:
    x = torch.randn(130, 4)
    with collect_traces() as traces:
        out = ns["relu"](x)
    forged = {**traces[0], "ops": [op for op in traces[0]["ops"] if op[0] != "op" or op[1] != "nl.store"][:5]}
    assert not verify_forward([forged], [x], [out]).ok
    assert "[host-compute]" in verify_forward(traces, [x], [torch.relu(x) + 1]).problem
    assert "[host-compute] tensor argument" in verify_forward(traces, [torch.randn(130, 4)], [out]).problem
    with pytest.raises(ReplayError):
        replay({**traces[0], "ops": [["op", "os.system", {"t": []}, {"d": {}}, None]]}, [x.numpy()])
    small = torch.randn(2, 3)
    with collect_traces() as constant:  # the answer computed on the host, written as immediate constants
        answer = ns["constant"](small, torch.relu(small).tolist())
    assert verify_forward(constant, [small], [answer]).ok  # one input set alone cannot tell constants from work
    other = torch.randn(2, 3)
    verdict = verify_forward(constant, [small], [answer], alternate=([other], [torch.relu(other)]))
    assert not verdict.ok and "another input set" in verdict.problem


def test_tiles_are_opaque_and_numpy_is_a_facade() -> None:
    body = textwrap.dedent('''
        import numpy as np
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def k(x, how):
            t = nl.load(x)
            if how == "float":
                float(t)
            if how == "array":
                np.array([1.0])
            if how == "ufunc":
                np.maximum(1.0, 2.0)
            return x
    ''')
    ns = load_candidate(body)
    for how, code in (("float", "err-host-access"), ("array", "err-host-numpy"), ("ufunc", "err-host-numpy")):
        with pytest.raises(NkiCompileError) as info:
            ns["k"](np.ones((4, 4), np.float32), how)
        assert info.value.code == code
    with nki_modules():
        import neuronxcc.nki.language as nl  # type: ignore[import-not-found]

        assert not any(hasattr(nl, name) for name in ("np", "numpy", "_cost", "cost", "math", "Tile", "current_run"))
