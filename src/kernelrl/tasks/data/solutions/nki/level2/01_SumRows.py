"""Row sums along the free axis, one 128-row tile at a time."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch
import torch.nn as nn


@nki.jit
def sum_rows_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(cols)[None, :]
    i_o = nl.arange(1)[None, :]
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        r = t * nl.tile_size.pmax + i_p
        tile = nl.load(x[r, i_f], mask=(r < rows))
        result = nl.sum(tile, axis=1, keepdims=True)
        nl.store(out[r, i_o], value=result, mask=(r < rows))
    return out


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_rows_kernel(x)
