"""Compare a candidate's outputs with the reference's, recursively through tuples, lists and dicts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

CHUNK_ELEMENTS = 1 << 16  # a large output is compared this many elements at a time (temporaries in L2)


@dataclass
class Comparison:
    ok: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    message: str = ""


def compare_outputs(reference: Any, candidate: Any, rtol: float, atol: float, path: str = "output") -> Comparison:
    """Elementwise |c - r| <= atol + rtol * |r| on every tensor leaf; NaN/Inf must match exactly.

    Types, container lengths, dict keys, shapes and dtypes must match; errors name the leaf's path.
    """
    if isinstance(reference, torch.Tensor):
        if not isinstance(candidate, torch.Tensor):
            return Comparison(False, message=f"{path}: expected a tensor, got {type(candidate).__name__}")
        return _compare_tensors(reference, candidate, rtol, atol, path)
    if isinstance(reference, list | tuple):
        if not isinstance(candidate, list | tuple):
            return Comparison(False, message=f"{path}: expected a {type(reference).__name__}, got {type(candidate).__name__}")
        if len(reference) != len(candidate):
            return Comparison(False, message=f"{path}: expected {len(reference)} elements, got {len(candidate)}")
        return _merge(compare_outputs(r, c, rtol, atol, f"{path}[{i}]") for i, (r, c) in enumerate(zip(reference, candidate, strict=True)))
    if isinstance(reference, dict):
        if not isinstance(candidate, dict) or set(reference) != set(candidate):
            got = sorted(candidate) if isinstance(candidate, dict) else type(candidate).__name__
            return Comparison(False, message=f"{path}: expected keys {sorted(reference)}, got {got}")
        return _merge(compare_outputs(reference[k], candidate[k], rtol, atol, f"{path}[{k!r}]") for k in reference)
    if isinstance(reference, int | float | bool) and isinstance(candidate, int | float | bool | torch.Tensor):
        value = float(candidate.item()) if isinstance(candidate, torch.Tensor) and candidate.numel() == 1 else candidate
        if isinstance(value, torch.Tensor):
            return Comparison(False, message=f"{path}: expected a scalar, got a tensor of shape {tuple(value.shape)}")
        ok = math.isclose(float(value), float(reference), rel_tol=rtol, abs_tol=atol) or (
            math.isnan(float(value)) and math.isnan(float(reference))
        )
        err = abs(float(value) - float(reference))
        return Comparison(ok, err, err / max(abs(float(reference)), 1e-12), "" if ok else f"{path}: expected {reference}, got {value}")
    if reference is None:
        return Comparison(candidate is None, message="" if candidate is None else f"{path}: expected None")
    return Comparison(reference == candidate, message="" if reference == candidate else f"{path}: values differ")


def _compare_tensors(ref: torch.Tensor, out: torch.Tensor, rtol: float, atol: float, path: str) -> Comparison:
    if out.shape != ref.shape:
        return Comparison(False, message=f"{path}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, message=f"{path}: dtype {out.dtype}, expected {ref.dtype}")
    if out.device != ref.device:
        out = out.to(ref.device)
    if ref.numel() == 0:
        return Comparison(True)
    ref, out = ref.detach(), out.detach()
    if not (ref.is_floating_point() or ref.is_complex()):
        bad = out != ref
        if not bool(bad.any()):
            return Comparison(True)
        return _mismatch(bad, out, ref, float((out.double() - ref.double()).abs().max()), 0.0, rtol, atol, path)
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    if ref.numel() > CHUNK_ELEMENTS and ref.is_floating_point() and ref.device.type == "cpu":
        within = _all_within_by_chunks(ref.reshape(-1), out.reshape(-1), rtol, atol, work)
        if within is not None:
            return Comparison(True, *within)
    r, o = ref.to(work), out.to(work)
    diff = (o - r).abs_()  # NaN where either is NaN or both are the same infinity; inf where one is
    abs_ref = r.abs()
    max_abs = float(diff.max())  # NaN if any difference is NaN
    if math.isfinite(max_abs):
        within = diff <= abs_ref.mul(rtol).add_(atol)
        if bool(within.all()):
            return Comparison(True, max_abs, float(diff.div_(abs_ref.clamp_min_(1e-12)).max()))
        return _mismatch(~within, o, r, max_abs, 0.0, rtol, atol, path)
    tol = abs_ref.mul_(rtol).add_(atol)
    # Slow path, only with NaN/Inf present: they must match exactly (same position, same sign).
    bad = (diff > tol) | (torch.isnan(o) ^ torch.isnan(r)) | ((torch.isinf(o) | torch.isinf(r)) & (o != r))
    finite = torch.isfinite(diff)
    max_abs = float(torch.where(finite, diff, torch.zeros_like(diff)).max())
    if not bool(bad.any()):
        return Comparison(True, max_abs, 0.0)
    return _mismatch(bad, o, r, max_abs, 0.0, rtol, atol, path)


def _all_within_by_chunks(ref: torch.Tensor, out: torch.Tensor, rtol: float, atol: float,
                          work: torch.dtype) -> tuple[float, float] | None:
    """(max abs error, max rel error) when every element of flat `ref` and `out` ([n] each) is finite and
    within tolerance, else None (the whole-tensor path then says what and where). The same arithmetic as
    that path, a chunk of CHUNK_ELEMENTS at a time in reused buffers: each input is read from memory once
    and the temporaries stay in cache (~4x faster on a 2M-element output than whole-tensor temporaries)."""
    diff, scale, bound = (torch.empty(CHUNK_ELEMENTS, dtype=work) for _ in range(3))
    within = torch.empty(CHUNK_ELEMENTS, dtype=torch.bool)
    max_abs = max_rel = 0.0
    for start in range(0, ref.numel(), CHUNK_ELEMENTS):
        r, o = ref[start : start + CHUNK_ELEMENTS], out[start : start + CHUNK_ELEMENTS]
        n = r.numel()
        d, a, b, w = diff[:n], scale[:n], bound[:n], within[:n]
        torch.sub(o.to(work), r.to(work), out=d).abs_()  # NaN or inf here: not all finite
        chunk_abs = float(d.max())
        if not math.isfinite(chunk_abs):
            return None
        a.copy_(r).abs_()
        if not bool(torch.le(d, torch.mul(a, rtol, out=b).add_(atol), out=w).all()):
            return None
        max_abs = max(max_abs, chunk_abs)
        max_rel = max(max_rel, float(d.div_(a.clamp_min_(1e-12)).max()))
    return max_abs, max_rel


def _mismatch(
    bad: torch.Tensor, out: torch.Tensor, ref: torch.Tensor, max_abs: float, max_rel: float, rtol: float, atol: float, path: str
) -> Comparison:
    first = bad.nonzero()[0].tolist()
    where = tuple(first) if len(first) > 1 else first[0]
    got, want = out[tuple(first)].item(), ref[tuple(first)].item()
    return Comparison(
        False,
        max_abs,
        max_rel,
        f"{path}: {int(bad.sum())} of {ref.numel()} elements differ (max abs error {max_abs:.3g}, "
        f"rtol={rtol:g}, atol={atol:g}); first at index {where}: got {got:.6g}, expected {want:.6g}",
    )


def _merge(parts: Any) -> Comparison:
    parts = list(parts)
    failed = next((p for p in parts if not p.ok), None)
    return Comparison(
        failed is None,
        max((p.max_abs_error for p in parts), default=0.0),
        max((p.max_rel_error for p in parts), default=0.0),
        failed.message if failed else "",
    )
