"""Rules text for a model writing NKI kernels for the interpreted subset."""

from kernelrl.nki.rules import (
    GEMM_MOVING_FMAX,
    GEMM_STATIONARY_FMAX,
    PMAX,
    PSUM_BANKS,
    PSUM_FMAX,
    SBUF_BYTES_PER_PARTITION,
)

NKI_RULES = f"""\
Write an NKI (Neuron Kernel Interface) kernel for one AWS NeuronCore.

Code shape:
- `import neuronxcc.nki as nki`, `import neuronxcc.nki.language as nl`, `import neuronxcc.nki.isa as nisa`.
- Decorate the kernel with `@nki.jit`. Its arguments are tensors in HBM (device memory). Create the
  output with `out = nl.ndarray(shape, dtype=..., buffer=nl.shared_hbm)`, write it with `nl.store`, and
  `return out`. Define `class ModelNew(nn.Module)` whose `forward` calls the kernel on its torch inputs
  and returns the result.

Memory and data movement:
- HBM -> SBUF with `tile = nl.load(hbm[...])`; SBUF -> HBM with `nl.store(hbm[...], value=tile)`.
  Engines never read HBM: load before computing. Store only into HBM (a PSUM tile is copied to SBUF
  for you). Masked-out lanes of a load hold undefined values (NaN here): never compute with them.
- `import numpy as np` gives dtype and ALU-op names only (`dtype=np.float32`, `op0=np.subtract`); tiles
  have no host values, so all compute is NKI instructions.
- The first dimension of every SBUF/PSUM tile is the partition dimension: at most {PMAX}
  (`nl.tile_size.pmax`). The remaining dims are the free dimensions.
- SBUF holds {SBUF_BYTES_PER_PARTITION // 1024} KiB per partition for all live tiles together.
- PSUM holds {PSUM_BANKS} banks of 2 KiB per partition; one PSUM tile's free size is at most
  {PSUM_FMAX} fp32 elements (`nl.tile_size.psum_fmax`). PSUM accumulates in float32.

Compute:
- Elementwise ops (`nl.add`, `nl.multiply`, `nl.exp`, `nl.relu`, ... or `+ - * /` on tiles) broadcast
  along free dims only: partition sizes of the operands must match; a [P, 1] tile broadcasts over a
  [P, F] tile. Reductions (`nl.sum`, `nl.max`, `nl.mean`, keepdims=True to broadcast back) run along
  free axes only, never axis 0.
- Matmul on the Tensor Engine: `nisa.nc_matmul(stationary[K, M], moving[K, N])` returns
  stationary.T @ moving as a new fp32 PSUM tile [M, N]; `nl.matmul(x[M, K], y[K, N])` computes x @ y
  (`transpose_x=True` when x is given as [K, M]). Limits: contraction K <= {PMAX} (the partition dim),
  stationary free size M <= {GEMM_STATIONARY_FMAX} (`gemm_stationary_fmax`), moving free size
  N <= {GEMM_MOVING_FMAX} (`gemm_moving_fmax`). Inputs are SBUF tiles of a float dtype. For K > {PMAX},
  start from `acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)` and accumulate with
  `acc += nisa.nc_matmul(...)` over K slices.
- `nl.transpose(tile)` swaps partition and free dims of a tile with both dims <= {PMAX}.

Tiling and indexing:
- Loop over tiles with `nl.affine_range(n)` (independent iterations: reading what an earlier iteration
  wrote is an error unless it accumulates with `+=`) or `nl.sequential_range(n)`; or launch an SPMD
  grid `kernel[g0, g1](...)` and pick the tile with `nl.program_id(axis)`.
- Index with slices (`x[i * 128:(i + 1) * 128, :]`) or index expressions
  (`i_p = nl.arange(128)[:, None]`, `i_f = nl.arange(F)[None, :]`, `x[base + i_p, i_f]`; a bare 1-D
  `nl.arange(n)` index is an error).
- Reading or writing HBM past its end is an error: when a size is not a multiple of the tile, mask the
  last tile: `nl.load(x[base + i_p, i_f], mask=(base + i_p < rows))` and the same mask on `nl.store`.

Violations are compile errors that name the rule and your line. Cost is estimated per engine
(Tensor, Vector, Scalar, GpSimd, DMA): fewer, larger instructions and fewer HBM bytes are faster.
"""
