# redteam-class: legit
# redteam-expect: ok
# redteam-task: affine
# redteam-policy: {"backend": "triton"}
# An honest linear layer in two launches (a tl.dot matmul into a scratch tensor, then a bias add through a
# helper @triton.jit function, with a grid callable and module constants): the judge's replay must put its
# reference weights where the candidate's parameters live and follow the scratch tensor between launches.
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_N = 32
BLOCK_K = 32


@triton.jit
def matmul_kernel(x_ptr, w_ptr, out_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        ks = k + tl.arange(0, BK)
        x = tl.load(x_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + cols[None, :] * K + ks[:, None], mask=(cols[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc += tl.dot(x, w)
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def _plus(a, b):
    return a + b


@triton.jit
def bias_kernel(h_ptr, b_ptr, y_ptr, total, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < total
    value = _plus(tl.load(h_ptr + offsets, mask=mask), tl.load(b_ptr + offsets % N, mask=mask))
    tl.store(y_ptr + offsets, value, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        weight, bias = self.linear.weight, self.linear.bias
        M, K = x.shape
        N = weight.shape[0]
        scratch = torch.empty(M, N)
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        matmul_kernel[grid](x, weight, scratch, M, N, K, BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K)
        y = torch.empty(M, N)
        bias_kernel[lambda meta: (triton.cdiv(M * N, meta["BLOCK"]),)](scratch, bias, y, M * N, N, BLOCK=1024)
        return y
