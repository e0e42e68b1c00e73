# redteam-class: nki-host-compute
# redteam-expect: compile_error|rejected
# redteam-task: nki_relu
# redteam-policy: {"backend": "nki"}
# redteam-reason: err-host-numpy
# NumPy is importable for dtypes and ALU ops, so this tries to build host arrays with it: the answer as an
# array handed to a copy kernel. The numpy an NKI candidate sees is a facade of dtype and op names.
import numpy as np
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
        host = np.array(x.tolist(), dtype=np.float32)
        return copy_kernel(torch.tensor(host.clip(0).tolist()))
