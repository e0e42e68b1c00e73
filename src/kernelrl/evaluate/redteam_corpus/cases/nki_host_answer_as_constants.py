# redteam-class: nki-host-compute
# redteam-expect: rejected
# redteam-task: nki_relu_tiny
# redteam-policy: {"backend": "nki"}
# redteam-reason: another input set
# The ReLU is computed on the host in plain Python and written by the kernel as immediate constants
# (one nl.full per element), so the kernel takes only trusted inputs and its trace, replayed on the same
# input set, reproduces the output exactly. Replayed on another input set (the judge's `alternate`), the
# same trace writes the first set's answer again.
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch
import torch.nn as nn


@nki.jit
def constant_kernel(x, values):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range(x.shape[0]):
        for j in nl.static_range(x.shape[1]):
            nl.store(out[i:i + 1, j:j + 1], value=nl.full((1, 1), values[i][j], nl.float32))
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        answer = [[v if v > 0 else 0.0 for v in row] for row in x.tolist()]
        return constant_kernel(x, answer)
