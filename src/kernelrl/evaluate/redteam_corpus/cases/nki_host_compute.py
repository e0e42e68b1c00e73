# redteam-class: nki-host-compute
# redteam-expect: rejected
# redteam-task: nki_relu
# redteam-policy: {"backend": "nki"}
# redteam-reason: host-compute
# The kernel runs (so a kernel was called), but forward returns a tensor computed on the host in plain
# Python, without a torch operator the op counter would see. The interpreter records every output a kernel
# returned; this one is not among them ([host-compute]). Reported by the candidate process: feedback.
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
        relu_kernel(x)
        rows = [[v if v > 0 else 0.0 for v in row] for row in x.tolist()]
        return torch.tensor(rows)
