"""The output comparison: the chunked path for large outputs must give the whole-tensor verdicts."""

from __future__ import annotations

import pytest
import torch

from kernelrl.evaluate.compare import CHUNK_ELEMENTS, compare_outputs

RTOL, ATOL = 1e-4, 1e-5
N = 3 * CHUNK_ELEMENTS + 123  # more than one chunk, and a short last one


def _pair(dtype: torch.dtype = torch.float32, n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ref = torch.randn(n, generator=generator, dtype=torch.float64).to(dtype)
    noise = (torch.randn(n, generator=generator, dtype=torch.float64) * 1e-7).to(dtype)
    return ref, ref + noise


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_close_outputs_pass_with_the_exact_errors(dtype: torch.dtype) -> None:
    ref, out = _pair(dtype)
    outcome = compare_outputs(ref, out, 1e-2, 1e-2)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    diff = (out.to(work) - ref.to(work)).abs()
    assert outcome.ok
    assert outcome.max_abs_error == pytest.approx(float(diff.max()))
    assert outcome.max_rel_error == pytest.approx(float((diff / ref.to(work).abs().clamp_min(1e-12)).max()))


@pytest.mark.parametrize("where", [0, CHUNK_ELEMENTS - 1, CHUNK_ELEMENTS, 2 * CHUNK_ELEMENTS + 7, N - 1])
def test_one_wrong_element_fails_and_is_named(where: int) -> None:
    ref, out = _pair()
    out[where] += 1.0
    outcome = compare_outputs(ref, out, RTOL, ATOL)
    assert not outcome.ok
    assert f"1 of {N} elements differ" in outcome.message
    assert f"first at index {where}:" in outcome.message


def test_matching_non_finite_values_pass_and_mismatched_ones_fail() -> None:
    ref, out = _pair()
    for i, value in [(5, float("nan")), (CHUNK_ELEMENTS + 1, float("inf")), (N - 2, float("-inf"))]:
        ref[i] = out[i] = value
    assert compare_outputs(ref, out, RTOL, ATOL).ok
    nan_in_output_only = out.clone()
    nan_in_output_only[2 * CHUNK_ELEMENTS] = float("nan")
    assert not compare_outputs(ref, nan_in_output_only, RTOL, ATOL).ok
    flipped = out.clone()
    flipped[CHUNK_ELEMENTS + 1] = float("-inf")
    outcome = compare_outputs(ref, flipped, RTOL, ATOL)
    assert not outcome.ok and f"first at index {CHUNK_ELEMENTS + 1}:" in outcome.message


def test_a_strided_output_is_compared_by_index_not_by_memory() -> None:
    ref, _ = _pair(n=512 * 513)
    transposed = ref.view(513, 512).t()  # shape (512, 513); its flat order is not its memory order
    assert compare_outputs(transposed, transposed.contiguous(), RTOL, ATOL).ok
    assert not compare_outputs(transposed, ref.view(512, 513), RTOL, ATOL).ok  # same memory, other places


def test_tolerance_is_relative_to_the_reference() -> None:
    ref = torch.full((N,), 1000.0)
    out = ref + 0.05  # |diff| 0.05 <= 1e-5 + 1e-4 * 1000 = 0.10001
    assert compare_outputs(ref, out, RTOL, ATOL).ok
    assert not compare_outputs(ref, ref + 0.2, RTOL, ATOL).ok


def test_large_integer_outputs_compare_exactly() -> None:
    ref = torch.arange(N)
    out = ref.clone()
    assert compare_outputs(ref, out, RTOL, ATOL).ok
    out[N // 2] += 1
    assert not compare_outputs(ref, out, RTOL, ATOL).ok
