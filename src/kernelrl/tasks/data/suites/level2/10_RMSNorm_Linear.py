"""RMS normalisation followed by a linear layer without bias."""

import torch
import torch.nn as nn

TASK_META = {
    "id": "level2/10_RMSNorm_Linear",
    "level": 2,
    "tags": ["norm", "matmul", "fused"],
    "profiles": {"gpu": {"batch_size": 8192, "in_features": 4096, "out_features": 4096}},
}

batch_size = 512
in_features = 512
out_features = 512


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.rand(in_features) + 0.5)
        self.fc = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.gain
        return self.fc(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
