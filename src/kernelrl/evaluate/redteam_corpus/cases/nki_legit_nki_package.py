# redteam-class: legit
# redteam-expect: ok
# redteam-task: nki_relu
# redteam-policy: {"backend": "nki"}
# An honest kernel in the standalone nki package's style (NKI Beta 2 and later): `import nki`, tiles made
# with nl.ndarray and every nki.isa instruction writing into its dst; the ragged last row tile is a shorter
# slice (the newer API has no masks).
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import torch.nn as nn


@nki.jit
def relu_rows(x):
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in range((rows + 127) // 128):
        size = min(128, rows - t * 128)
        tile = nl.ndarray((size, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[t * 128:t * 128 + size, 0:cols])
        relu = nl.ndarray((size, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=relu, data=tile, op0=np.maximum, operand0=0.0)
        nisa.dma_copy(dst=out[t * 128:t * 128 + size, 0:cols], src=relu)
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_rows(x)
