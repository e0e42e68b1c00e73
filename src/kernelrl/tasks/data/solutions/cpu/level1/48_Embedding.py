"""Embedding lookup: one row copy per index."""

import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

void embed(const int64_t* restrict ids, const float* restrict table, float* restrict y, int64_t count, int64_t dim) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) std::memcpy(y + i * dim, table + ids[i] * dim, dim * sizeof(float));
}
"""

lib = load_cpp(SOURCE, functions=["embed"])


class ModelNew(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.contiguous()
        dim = self.table.embedding_dim
        y = torch.empty(*ids.shape, dim)
        lib.embed(ids, self.table.weight, y, ids.numel(), dim)
        return y
