"""Kernels in the newer standalone `nki` package's style (`import nki`, `nki.isa` instructions that write
into `dst`), own kernels written for these tests; and the Beta 1 additions `tensor_tensor_scan` and
multi-core launch grids (`nl.spmd_dim(n, nl.nc(2))`)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from kernelrl.nki import NkiCompileError, load_candidate, run_kernel
from kernelrl.nki.trace import replay

DST_STYLE = textwrap.dedent('''
    import nki
    import nki.isa as nisa
    import nki.language as nl
    import numpy as np


    @nki.jit
    def matmul_k_tiled(lhs_t, rhs):
        k_size, m_size = lhs_t.shape
        _, n_size = rhs.shape
        out = nl.ndarray((m_size, n_size), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
        for n in nl.affine_range(n_size // 512):
            acc = nl.ndarray((m_size, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // 128):
                a = nl.ndarray((128, m_size), dtype=lhs_t.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhs_t[k * 128:(k + 1) * 128, 0:m_size])
                nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((m_size, 512), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[0:m_size, n * 512:(n + 1) * 512], src=res)
        return out


    @nki.jit
    def scaled_exp_row_sum(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols + 1), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        shifted = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=shifted, data=t, op0=np.subtract, operand0=1.0, op1=np.multiply, operand1=0.5)
        e = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=shifted, reduce_op=nl.add, reduce_res=total)
        packed = nl.ndarray((rows, cols + 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=packed, value=0.0)
        nisa.tensor_tensor(dst=packed[0:rows, 0:cols], data1=e, data2=t, op=nl.multiply)
        nisa.tensor_copy(dst=packed[0:rows, cols:cols + 1], src=total)
        nisa.dma_copy(dst=out, src=packed)
        return out


    @nki.jit
    def matmul_hoisted_psum(lhs_t, rhs):
        out = nl.ndarray((lhs_t.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((lhs_t.shape[1], 512), dtype=nl.float32, buffer=nl.psum)
        res = nl.ndarray((lhs_t.shape[1], 512), dtype=nl.float32, buffer=nl.sbuf)
        for n in nl.sequential_range(rhs.shape[1] // 512):
            for k in nl.sequential_range(lhs_t.shape[0] // 128):
                a = nl.ndarray((128, lhs_t.shape[1]), dtype=lhs_t.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhs_t[k * 128:(k + 1) * 128, :])
                nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[:, n * 512:(n + 1) * 512], src=res)
        return out


    @nki.jit
    def column_block_sum(x, affine):
        loop = nl.affine_range if affine else nl.sequential_range
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for c in loop(x.shape[1] // 64):
            part = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=part, src=x[0:128, c * 64:(c + 1) * 64])
            nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op=nl.add)
        nisa.dma_copy(dst=out, src=acc)
        return out


    @nki.jit
    def psum_overflow(x):
        out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.psum)
        a = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        nisa.nc_matmul(dst=acc, stationary=a, moving=a)
        return out
''')

rng = np.random.default_rng(1)


@pytest.fixture(scope="module")
def ns() -> dict:
    return load_candidate(DST_STYLE)


def test_destination_passing_matmul_accumulates_over_k_and_replays(ns: dict) -> None:
    """The first nc_matmul into a fresh PSUM tile starts the accumulation group, later ones add."""
    lhs_t, rhs = rng.standard_normal((384, 96)).astype(np.float32), rng.standard_normal((384, 1024)).astype(np.float32)
    result = run_kernel(ns["matmul_k_tiled"], lhs_t, rhs)
    np.testing.assert_allclose(result.outputs, lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)
    assert result.cost.instructions["tensor"] == 3 * 2 and result.psum_peak_banks <= 2  # one per n block (the last is live as the next is made)
    outputs, run = replay(result.trace, [lhs_t, rhs])
    np.testing.assert_array_equal(outputs[0], result.outputs)
    assert run.cost.busy_us == result.cost.busy_us


def test_a_psum_tile_reused_after_its_result_is_read_starts_a_new_group(ns: dict) -> None:
    lhs_t, rhs = rng.standard_normal((256, 64)).astype(np.float32), rng.standard_normal((256, 1024)).astype(np.float32)
    np.testing.assert_allclose(ns["matmul_hoisted_psum"](lhs_t, rhs), lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)


def test_destination_passing_vector_and_scalar_instructions(ns: dict) -> None:
    x = rng.standard_normal((128, 40)).astype(np.float32)
    out = ns["scaled_exp_row_sum"](x)
    e = np.exp((x - 1.0) * 0.5)
    np.testing.assert_allclose(out[:, :40], e * x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[:, 40], e.sum(1), rtol=1e-5)


def test_destination_passing_matmul_needs_an_fp32_psum_dst(ns: dict) -> None:
    with pytest.raises(NkiCompileError, match="fp32 PSUM") as info:
        ns["psum_overflow"](rng.standard_normal((128, 128)).astype(np.float32))
    assert info.value.lineno is not None


def test_destination_passing_accumulator_in_affine_range_is_a_carried_dependency(ns: dict) -> None:
    """An SBUF accumulator read and rewritten each iteration needs nl.sequential_range (the tutorials use it)."""
    x = rng.standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_allclose(ns["column_block_sum"](x, False), x.reshape(128, 4, 64).sum(1), rtol=1e-5, atol=1e-5)
    with pytest.raises(NkiCompileError) as info:
        ns["column_block_sum"](x, True)
    assert info.value.code == "err-loop-carried-dependency"


BETA1_ADDITIONS = textwrap.dedent('''
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl


    @nki.jit
    def decayed_running_sum(decay, x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        carry = nl.zeros((x.shape[0], 1), dtype=nl.float32)
        for c in nl.sequential_range(x.shape[1] // 64):
            d = nl.load(decay[:, c * 64:(c + 1) * 64])
            v = nl.load(x[:, c * 64:(c + 1) * 64])
            h = nisa.tensor_tensor_scan(d, v, initial=carry, op0=np.multiply, op1=np.add)
            carry[...] = h[:, 63]
            nl.store(out[:, c * 64:(c + 1) * 64], value=h)
        return out


    @nki.jit
    def add_tile(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        rows = nl.program_id(0) * 128 + nl.arange(128)[:, None]
        cols = nl.arange(a.shape[1])[None, :]
        nl.store(out[rows, cols], value=nl.load(a[rows, cols]) + nl.load(b[rows, cols]))
        return out


    def add_on_two_cores(a, b):
        return add_tile[nl.spmd_dim(a.shape[0] // 256, nl.nc(2))](a, b)
''')


def test_tensor_tensor_scan_carries_across_chunks() -> None:
    ns = load_candidate(BETA1_ADDITIONS)
    decay = rng.uniform(0.5, 1.0, (128, 192)).astype(np.float32)
    x = rng.standard_normal((128, 192)).astype(np.float32)
    expected, h = np.empty_like(x), np.zeros(128, np.float64)
    for i in range(192):
        h = decay[:, i] * h + x[:, i]
        expected[:, i] = h
    np.testing.assert_allclose(ns["decayed_running_sum"](decay, x), expected, rtol=1e-5, atol=1e-5)


def test_multi_core_grid_axis_has_cores_times_size_programs() -> None:
    ns = load_candidate(BETA1_ADDITIONS)
    a, b = rng.standard_normal((512, 64)).astype(np.float32), rng.standard_normal((512, 64)).astype(np.float32)
    np.testing.assert_allclose(ns["add_on_two_cores"](a, b), a + b)


FUSED_REDUCTIONS = textwrap.dedent('''
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl


    @nki.jit
    def fused(x, y):
        out = nl.ndarray((x.shape[0], 3 * x.shape[1] + 2), dtype=np.float32, buffer=nl.shared_hbm)
        f = x.shape[1]
        t, u = nl.load(x), nl.load(y)
        exp_sum = nl.ndarray((x.shape[0], 1), dtype=np.float32)
        e = nisa.activation_reduce(op=np.exp, data=t, reduce_op=np.add, reduce_res=exp_sum[...],
                                   bias=nl.full((x.shape[0], 1), nl.fp32.min * 0.0, np.float32))
        abs_max = nl.ndarray((x.shape[0], 1), dtype=np.float32)
        a = nisa.tensor_scalar_reduce(data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum, reduce_res=abs_max)
        fma = nisa.scalar_tensor_tensor(data=t, op0=np.multiply, operand0=2.0, op1=np.add, operand1=u,
                                        engine=nisa.vector_engine)
        picked = nl.where(nl.greater(t, 0.0), t, u)
        nl.store(out[:, 0:f], value=e)
        nl.store(out[:, f:2 * f], value=fma)
        nl.store(out[:, 2 * f:3 * f], value=nl.add(picked, nl.multiply(a, 0.0)))
        nl.store(out[:, 3 * f:3 * f + 1], value=exp_sum)
        nl.store(out[:, 3 * f + 1:3 * f + 2], value=abs_max)
        return out
''')


def test_fused_reductions_scalar_tensor_tensor_and_where() -> None:
    """activation_reduce / tensor_scalar_reduce write their reduction into reduce_res (the flash-attention
    and quantisation kernels' style); scalar_tensor_tensor and nl.where compute elementwise."""
    ns = load_candidate(FUSED_REDUCTIONS)
    x, y = rng.standard_normal((128, 32)).astype(np.float32), rng.standard_normal((128, 32)).astype(np.float32)
    out = ns["fused"](x, y)
    np.testing.assert_allclose(out[:, 0:32], np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(out[:, 32:64], 2 * x + y, rtol=1e-6)
    np.testing.assert_allclose(out[:, 64:96], np.where(x > 0, x, y))
    np.testing.assert_allclose(out[:, 96], np.exp(x).sum(1), rtol=1e-5)
    np.testing.assert_allclose(out[:, 97], np.abs(x).max(1))


DST_FUSED = textwrap.dedent('''
    import nki
    import nki.isa as nisa
    import nki.language as nl
    import numpy as np


    @nki.jit
    def dst_fused(x, y):
        out = nl.ndarray((x.shape[0], 2 * x.shape[1] + 1), dtype=nl.float32, buffer=nl.shared_hbm)
        f = x.shape[1]
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=u, src=y)
        res = nl.ndarray((x.shape[0], 2 * f + 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=res[:, 0:f], data=t, op0=np.subtract, operand0=1.0, op1=np.multiply, operand1=u)
        nisa.tensor_scalar_reduce(dst=res[:, f:2 * f], data=t, op0=np.multiply, operand0=3.0, reduce_op=np.add,
                                  reduce_res=res[:, 2 * f:2 * f + 1])
        nisa.dma_copy(dst=out, src=res)
        return out
''')


def test_destination_passing_fused_instructions() -> None:
    ns = load_candidate(DST_FUSED)
    x, y = rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 16)).astype(np.float32)
    out = ns["dst_fused"](x, y)
    np.testing.assert_allclose(out[:, :16], (x - 1) * y, rtol=1e-6)
    np.testing.assert_allclose(out[:, 16:32], 3 * x, rtol=1e-6)
    np.testing.assert_allclose(out[:, 32], 3 * x.sum(1), rtol=1e-5, atol=1e-5)
