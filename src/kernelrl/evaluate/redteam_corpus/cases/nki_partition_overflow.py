# redteam-class: nki-tile-rules
# redteam-expect: compile_error
# redteam-task: nki_relu
# redteam-policy: {"backend": "nki"}
# redteam-reason: err-partition-dim
# One 200-row tile: more partitions than the 128 an SBUF tile has. On Trainium the compiler refuses it;
# the interpreter must too (a NumPy array would happily hold it).
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch
import torch.nn as nn


@nki.jit
def relu_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    i_p = nl.arange(rows)[:, None]
    i_f = nl.arange(cols)[None, :]
    nl.store(out[i_p, i_f], value=nl.relu(nl.load(x[i_p, i_f])))
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_kernel(x)
