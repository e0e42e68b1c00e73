# redteam-class: nki-host-compute
# redteam-expect: compile_error|rejected
# redteam-task: nki_relu
# redteam-policy: {"backend": "nki"}
# redteam-reason: err-host-numpy
# NumPy computes the answer on the host and the kernel only copies it. The numpy an NKI candidate imports is
# a facade of dtype and ALU-op names (np.maximum names an op; calling it computes nothing).
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch
import torch.nn as nn


@nki.jit
def relu_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        r = t * nl.tile_size.pmax + i_p
        x_t = nl.load(x[r, i_f], mask=(r < rows))
        nl.store(out[r, i_f], value=nl.relu(x_t), mask=(r < rows))
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_kernel(torch.from_numpy(np.maximum(x.numpy(), 0)))
