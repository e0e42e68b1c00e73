# redteam-class: nki-tile-rules
# redteam-expect: incorrect
# redteam-task: nki_relu
# redteam-policy: {"backend": "nki"}
# Forgets the masked ragged tile: rows 128-199 of the output are never written (NaN-filled by the interpreter).
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
    nl.store(out[i_p, i_f], value=nl.relu(nl.load(x[i_p, i_f])))
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_kernel(x)
