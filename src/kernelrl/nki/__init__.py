"""A pure-NumPy interpreter for a documented subset of AWS Neuron's NKI (Neuron Kernel Interface).

It runs `@nki.jit` kernels on the CPU, enforces the hardware rules the NKI compiler enforces (raising
`NkiCompileError` with the candidate's line), and estimates cost per engine (`CostReport`, an
instruction-level *estimate*, never wall time). Candidate code imports the real names
(`import neuronxcc.nki as nki`, `neuronxcc.nki.language as nl`, `neuronxcc.nki.isa as nisa`); inside
`nki_modules()` / `load_candidate()` they resolve to this package when the Neuron SDK is absent.

Subset:
- kernels: `@nki.jit` functions taking HBM tensors (numpy/torch inputs are copied into HBM) and returning
  HBM tensor(s) made with `nl.ndarray(shape, dtype, buffer=nl.shared_hbm)`; SPMD grids `kernel[grid]`
  with `nl.program_id`; `nki.baremetal`, `nki.simulate_kernel`, `nki.typing`. DESIGN.md's NKI section
  lists the full API against the NKI reference and what is left out.
- tiles are opaque (values in private attributes); every NKI call is recorded in a JSON trace that the
  judge replays with its own interpreter and cost model (`trace.replay`, `verify.verify_forward`).
- buffers `nl.sbuf`, `nl.psum`, `nl.shared_hbm`/`nl.hbm`; `nl.ndarray`, `nl.zeros`, `nl.ones`, `nl.full`,
  `nl.par_dim`, `nl.tile_size`; `nl.load(hbm_view, mask=, dtype=)` -> SBUF tile,
  `nl.store(hbm_view, value=tile, mask=)`; HBM `reshape`.
- indexing with ints, slices (`nl.ds`), `nl.arange` (`[:, None]`/`[None, :]`), `nl.mgrid`, index
  arithmetic, masks from comparisons combined with `&`/`|`; loops `nl.affine_range`,
  `nl.sequential_range`, `nl.static_range` (plain Python ranges here).
- compute on SBUF/PSUM tiles: elementwise/activations (exp log tanh sigmoid relu gelu
  gelu_apprx_tanh silu softplus erf sqrt rsqrt negative abs square sign sin cos floor ceil
  reciprocal; add subtract multiply divide maximum minimum power and comparisons, also as Python
  operators), broadcasting along free dims only; reductions `nl.sum/max/min/mean/prod(axis=free
  axes, keepdims=)`; `nl.copy`; `nl.transpose`; `nl.matmul(x, y, transpose_x=)`; dtype casts
  (float32, bfloat16 rounded to nearest-even in fp32 storage, float16, int32, int8, uint8);
  `mask=` on compute; masked-out lanes of a load or of a masked instruction are poison (NaN).
- `nisa`: nc_matmul, nc_transpose, activation, tensor_tensor, tensor_scalar, tensor_reduce,
  tensor_tensor_scan, tensor_copy, memset, bn_stats, bn_aggr, dma_copy. PSUM accumulation with
  `psum_tile += nisa.nc_matmul(...)` (fp32 PSUM only).
- the standalone `nki` package (`import nki`, `nki.language`, `nki.isa`): the same language, and
  `nki.isa` instructions in destination-passing form (`nisa.nc_matmul(dst=psum, stationary=, moving=)`),
  see `kernelrl.nki.dstisa`.
- rules (see `rules.py` for numbers and sources): partition dim <= 128; PSUM tile free size <= 512
  fp32 and at most 8 live 2 KiB banks per partition; matmul K <= 128, stationary free <= 128, moving
  free <= 512, SBUF operands of float dtype; live SBUF <= 192 KiB per partition (liveness from Python
  references); no compute on HBM; store only to HBM; 1-D arange indexing; affine_range loop-carried dependencies; out-of-bounds HBM/tile access
  without a covering mask; no reduction over the partition axis.
"""

from kernelrl.nki.cost import CostReport
from kernelrl.nki.interpret import (
    JitKernel,
    KernelResult,
    collect_costs,
    jit,
    load_candidate,
    nki_modules,
    real_sdk_available,
    run_kernel,
)
from kernelrl.nki.rules import NkiCompileError

__all__ = [
    "CostReport",
    "JitKernel",
    "KernelResult",
    "NkiCompileError",
    "collect_costs",
    "jit",
    "load_candidate",
    "nki_modules",
    "real_sdk_available",
    "run_kernel",
]
