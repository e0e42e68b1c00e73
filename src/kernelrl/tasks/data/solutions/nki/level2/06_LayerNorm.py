"""Layer norm: mean and variance along the free axis, then rsqrt scaling."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch
import torch.nn as nn


@nki.jit
def layernorm_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(cols)[None, :]
    i_o = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        r = t * nl.tile_size.pmax + i_p
        tile = nl.load(x[r, i_f], mask=(r < rows))
        centered = nl.subtract(tile, nl.mean(tile, axis=1, keepdims=True))
        var = nl.mean(nl.square(centered), axis=1, keepdims=True)
        result = nl.multiply(centered, nl.rsqrt(var + 1e-5))
        nl.store(out[r, i_o], value=result, mask=(r < rows))
    return out


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_kernel(x)
