"""2x + 1 as one two-op nisa.tensor_scalar instruction per tile."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import torch
import torch.nn as nn


@nki.jit
def scale_shift_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        r = t * nl.tile_size.pmax + i_p
        x_t = nl.load(x[r, i_f], mask=(r < rows))
        nl.store(out[r, i_f], value=nisa.tensor_scalar(x_t, nl.multiply, 2.0, op1=nl.add, operand1=1.0), mask=(r < rows))
    return out


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale_shift_kernel(x)
