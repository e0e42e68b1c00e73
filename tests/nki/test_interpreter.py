"""The NKI interpreter: results against numpy/torch, the hardware rules (message and candidate line),
masks on ragged tiles, the cost estimate, and the import shim."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import torch

from kernelrl.nki import NkiCompileError, collect_costs, load_candidate, nki_modules, run_kernel

HEADER = """\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""

KERNELS = HEADER + textwrap.dedent('''
    @nki.jit
    def add_relu(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(a.shape[1])[None, :]
        for t in nl.affine_range((a.shape[0] + 127) // 128):
            rows = t * 128 + i_p
            x = nl.load(a[rows, i_f], mask=rows < a.shape[0])
            y = nl.load(b[rows, i_f], mask=rows < a.shape[0])
            nl.store(out[rows, i_f], value=nl.relu(nl.add(x, y)), mask=rows < a.shape[0])
        return out

    @nki.jit
    def softmax_rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range(x.shape[0] // 128):
            tile = nl.load(x[t * 128:(t + 1) * 128, :])
            e = nl.exp(nl.subtract(tile, nl.max(tile, axis=1, keepdims=True)))
            nl.store(out[t * 128:(t + 1) * 128, :], value=nl.divide(e, nl.sum(e, axis=1, keepdims=True)))
        return out

    @nki.jit
    def matmul_tiled(a_t, b):
        K, M = a_t.shape
        _, N = b.shape
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        for m in nl.affine_range(M // 128):
            for n in nl.affine_range(N // 512):
                acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // 128):
                    s = nl.load(a_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                    mv = nl.load(b[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                    acc += nisa.nc_matmul(s, mv)
                nl.store(out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc))
        return out

    @nki.jit
    def matmul_nl(a, b):
        out = nl.ndarray((a.shape[0], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((a.shape[0], b.shape[1]), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(a.shape[1] // 128):
            x = nl.load(a[:, k * 128:(k + 1) * 128])
            y = nl.load(b[k * 128:(k + 1) * 128, :])
            acc[...] += nl.matmul(x, y)
        nl.store(out, value=nl.copy(acc))
        return out

    @nki.jit
    def transpose2d(x):
        out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
        tile = nl.load(x[i_p, i_f])
        nl.store(out, value=nl.transpose(tile))
        return out

    @nki.jit
    def scale_bias(x, w):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.load(x)
        col = nl.load(w)
        y = nisa.activation(nl.tanh, t, bias=col, scale=2.0)
        nl.store(out, value=nl.copy(y, dtype=nl.bfloat16))
        return out
''')


@pytest.fixture(scope="module")
def ns() -> dict:
    return load_candidate(KERNELS, "<kernels>")


def test_elementwise_with_masked_ragged_tile(ns: dict) -> None:
    a, b = torch.randn(300, 96), torch.randn(300, 96)
    out = ns["add_relu"](a, b)
    assert isinstance(out, torch.Tensor) and out.shape == (300, 96)
    assert torch.allclose(out, torch.relu(a + b), atol=1e-6)


def test_row_softmax(ns: dict) -> None:
    x = np.random.default_rng(0).standard_normal((256, 200)).astype(np.float32)
    result = run_kernel(ns["softmax_rows"], x)
    ref = torch.softmax(torch.from_numpy(x), dim=1).numpy()
    np.testing.assert_allclose(result.outputs, ref, rtol=1e-5, atol=1e-6)


def test_tiled_matmul_accumulates_over_k_in_psum(ns: dict) -> None:
    rng = np.random.default_rng(1)
    a_t = rng.standard_normal((384, 256)).astype(np.float32)
    b = rng.standard_normal((384, 1024)).astype(np.float32)
    result = run_kernel(ns["matmul_tiled"], a_t, b)
    np.testing.assert_allclose(result.outputs, a_t.T @ b, rtol=1e-4, atol=1e-3)
    assert result.cost.instructions["tensor"] == 2 * 2 * 3
    a = torch.randn(128, 256)
    bb = torch.randn(256, 64)
    assert torch.allclose(ns["matmul_nl"](a, bb), a @ bb, atol=1e-3)


def test_transpose_and_activation_with_bias(ns: dict) -> None:
    x = torch.randn(96, 40)
    assert torch.equal(ns["transpose2d"](x), x.T)
    x, w = torch.randn(64, 32), torch.randn(64, 1)
    out = ns["scale_bias"](x, w)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), torch.tanh(2 * x + w), atol=1e-2)


def _violation(body: str, *args: object) -> tuple[NkiCompileError, int]:
    """Run a one-kernel candidate; return its error and the line marked `# HERE`."""
    source = HEADER + "\n@nki.jit\ndef k(*args):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "# HERE" in text)
    kernel = load_candidate(source, "<candidate>")["k"]
    with pytest.raises(NkiCompileError) as info:
        kernel(*args)
    return info.value, line


X = np.ones((256, 1024), dtype=np.float32)
RULES = [
    ("err-partition-dim", "exceeds nl.tile_size.pmax", "t = nl.load(args[0][0:256, 0:64])  # HERE\n"),
    ("err-partition-dim", "pmax", "t = nl.zeros((200, 4), nl.float32)  # HERE\n"),
    ("err-psum-free-size", "psum_fmax", "acc = nl.zeros((128, 1024), nl.float32, buffer=nl.psum)  # HERE\n"),
    (
        "err-psum-capacity",
        "8 banks",
        "tiles = []\nfor i in nl.static_range(9):\n    tiles.append(nl.zeros((128, 512), nl.float32, buffer=nl.psum))  # HERE\n",
    ),
    (
        "err-matmul-stationary-fmax",
        "gemm_stationary_fmax",
        "s = nl.load(args[0][0:128, 0:256])\nm = nl.load(args[0][0:128, 0:256])\np = nisa.nc_matmul(s, m)  # HERE\n",
    ),
    (
        "err-matmul-moving-fmax",
        "gemm_moving_fmax",
        "s = nl.load(args[0][0:128, 0:128])\nm = nl.load(args[0][0:128, 0:1024])\np = nisa.nc_matmul(s, m)  # HERE\n",
    ),
    (
        "err-matmul-contraction",
        "contraction",
        "s = nl.load(args[0][0:128, 0:128])\nm = nl.load(args[0][0:64, 0:128])\np = nisa.nc_matmul(s, m)  # HERE\n",
    ),
    (
        "err-matmul-dtype",
        "float types",
        "s = nl.load(args[0][0:128, 0:128], dtype=nl.int32)\nm = nl.load(args[0][0:128, 0:128])\n"
        "p = nisa.nc_matmul(s, m)  # HERE\n",
    ),
    (
        "err-sbuf-capacity",
        "192 KiB",
        "keep = []\nfor i in nl.static_range(8):\n    keep.append(nl.zeros((128, 8192), nl.float32))  # HERE\n",
    ),
    ("err-compute-on-hbm", "nl.load it first", "y = nl.exp(args[0])  # HERE\n"),
    ("err-compute-on-hbm", "nl.load it first", "y = args[0][0:128, 0:4] * 2.0  # HERE\n"),
    (
        "err-store-target",
        "HBM only",
        "t = nl.load(args[0][0:128, 0:4])\nu = nl.zeros((128, 4), nl.float32)\nnl.store(u, value=t)  # HERE\n",
    ),
    (
        "err-store-value",
        "SBUF or PSUM tile",
        "out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)\nnl.store(out, value=2.0)  # HERE\n",
    ),
    (
        "err-psum-accumulate-dtype",
        "fp32",
        "acc = nl.zeros((128, 128), nl.bfloat16, buffer=nl.psum)\ns = nl.load(args[0][0:128, 0:128])\n"
        "acc += nisa.nc_matmul(s, s)  # HERE\n",
    ),
    (
        "err-out-of-bound-access",
        "out of bounds for dimension 0 of size 256",
        "for t in nl.affine_range(3):\n    x = nl.load(args[0][t * 128:(t + 1) * 128, 0:8])  # HERE\n",
    ),
    ("err-partition-reduce", "partition dimension", "t = nl.load(args[0][0:128, 0:8])\ns = nl.sum(t, axis=0)  # HERE\n"),
    ("err-hbm-assign", "nl.store", "t = nl.load(args[0][0:128, 0:8])\nargs[0][0:128, 0:8] = t  # HERE\n"),
]


@pytest.mark.parametrize(("code", "text", "body"), RULES, ids=[f"{r[0]}-{i}" for i, r in enumerate(RULES)])
def test_rule_violation_reports_code_message_and_line(code: str, text: str, body: str) -> None:
    error, line = _violation(body + "return args[0]\n", X)
    assert error.code == code, str(error)
    assert text in error.message
    assert error.lineno == line and error.filename == "<candidate>"
    assert str(error).startswith(f"<candidate>:{line}: error [{code}]")


def test_mask_covers_the_ragged_tile_and_missing_mask_is_an_error() -> None:
    body = """
    out = nl.ndarray(args[0].shape, dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(8)[None, :]
    for t in nl.affine_range(2):
        tile = nl.load(args[0][t * 128 + i_p, i_f], mask=(t * 128 + i_p < 200))
        nl.store(out[t * 128 + i_p, i_f], value=nl.exp(tile), mask=(t * 128 + i_p < 200))
    return out
    """
    x = np.random.default_rng(2).standard_normal((200, 8)).astype(np.float32)
    source = HEADER + "\n@nki.jit\ndef k(*args):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    out = load_candidate(source)["k"](x)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
    error, line = _violation(
        body.replace(", mask=(t * 128 + i_p < 200))\n        nl.store", ")  # HERE\n        nl.store"), x
    )
    assert error.code == "err-out-of-bound-access" and "mask" in error.message and error.lineno == line


def test_cost_grows_with_work_and_matmul_is_tensor_engine(ns: dict) -> None:
    small = run_kernel(ns["add_relu"], np.ones((128, 64), np.float32), np.ones((128, 64), np.float32)).cost
    big = run_kernel(ns["add_relu"], np.ones((1024, 512), np.float32), np.ones((1024, 512), np.float32)).cost
    assert big.estimated_total_us > 4 * small.estimated_total_us
    assert big.busy_us["dma"] > small.busy_us["dma"] and big.busy_us["vector"] > small.busy_us["vector"]
    assert small.instructions["tensor"] == 0 and small.busy_us["scalar"] > 0
    rng = np.random.default_rng(3)
    mm1 = run_kernel(ns["matmul_tiled"], rng.random((128, 128), np.float32), rng.random((128, 512), np.float32)).cost
    mm2 = run_kernel(ns["matmul_tiled"], rng.random((512, 128), np.float32), rng.random((512, 512), np.float32)).cost
    assert mm1.instructions["tensor"] == 1 and mm2.instructions["tensor"] == 4
    assert mm2.busy_us["tensor"] == pytest.approx(4 * mm1.busy_us["tensor"])
    assert mm2.flops == 4 * mm1.flops == 4 * 2 * 128 * 128 * 512
    report = mm2.to_dict()
    assert report["kind"] == "estimated" and "estimated" in mm2.summary() and "wall" in mm2.summary()
    assert report["estimated_total_us"] == pytest.approx(max(
        v for e, v in mm2.busy_us.items() if e != "dma") + mm2.busy_us["dma"])
    with collect_costs() as total:
        ns["softmax_rows"](np.ones((128, 16), np.float32))
        ns["softmax_rows"](np.ones((128, 16), np.float32))
    assert total.kernels == 2 and total.instructions["scalar"] == 2


def test_shim_is_installed_only_inside_the_context() -> None:
    assert "neuronxcc" not in sys.modules
    with nki_modules() as installed:
        assert installed
        import neuronxcc.nki.language as nl  # type: ignore[import-not-found]

        assert nl.tile_size.pmax == 128 and nl.tile_size.gemm_moving_fmax == 512
    assert "neuronxcc" not in sys.modules
    with pytest.raises(ImportError):
        import neuronxcc  # type: ignore[import-not-found]  # noqa: F401


def test_kernel_must_return_hbm_and_api_outside_kernel_fails() -> None:
    source = HEADER + "\n@nki.jit\ndef k(x):\n    return nl.load(x)\n"
    with pytest.raises(NkiCompileError, match="must return the HBM tensor"):
        load_candidate(source)["k"](np.ones((4, 4), np.float32))
    from kernelrl.nki import language as nl

    with pytest.raises(NkiCompileError, match=r"outside an @nki\.jit kernel"):
        nl.zeros((4, 4), nl.float32)
