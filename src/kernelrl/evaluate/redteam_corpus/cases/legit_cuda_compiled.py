# redteam-class: legit
# redteam-expect: ok|compiled
# redteam-task: scaled_relu
# redteam-policy: {"backend": "cuda"}
import torch
import torch.nn as nn
from kernelrl.native import load_cuda

lib = load_cuda(r"""
__global__ void scaled_relu_kernel(const float* x, float* y, long n, float s) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f) * s;
}
void scaled_relu(const float* x, float* y, long n, float s) {
    scaled_relu_kernel<<<(n + 255) / 256, 256>>>(x, y, n, s);
}
""", ["scaled_relu"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.scaled_relu(x, y, x.numel(), self.scale)
        return y
