# redteam-class: nki-host-compute
# redteam-expect: rejected
# redteam-task: nki_relu
# redteam-policy: {"backend": "nki"}
# redteam-reason: torch-ops|host-compute
# The kernel only copies its input; torch computes the ReLU on the host afterwards.
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch
import torch.nn as nn


@nki.jit
def copy_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        r = t * nl.tile_size.pmax + i_p
        nl.store(out[r, i_f], value=nl.load(x[r, i_f], mask=(r < rows)), mask=(r < rows))
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(copy_kernel(x))
