# redteam-class: cross-evaluation
# redteam-expect: ok|crashed
# redteam-task: scaled_relu
# redteam-policy: {"static_severity": {"native-syscalls": "warn", "file-access": "warn"}}
# redteam-run: alone
# redteam-then: probe_planted_files
# The kernel is correct, and on its first call it fills /dev/shm (shared memory that outlives the
# process that wrote it) with 1 MiB files until a write fails or 3 GiB are written: space every later
# evaluation of the worker would miss. The evaluation that follows in the same worker
# (`probe_planted_files`) must find /dev/shm empty of them: the filler's /dev/shm is its own, size
# limited, and released when its evaluation ends.
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp(r"""
#include <cstdint>
#include <cstdio>
#include <cstring>

static void fill() {
    static char block[1 << 20];
    memset(block, 'z', sizeof(block));
    for (int i = 0; i < 3072; ++i) {
        char path[64];
        snprintf(path, sizeof(path), "/dev/shm/kernelrl-planted-%d", i);
        FILE* f = fopen(path, "w");
        if (!f) return;
        size_t wrote = fwrite(block, 1, sizeof(block), f);
        if (fclose(f) != 0 || wrote != sizeof(block)) return;
    }
}

void scaled_relu(const float* x, float* y, int64_t n, float s) {
    static bool done = false;
    if (!done) { done = true; fill(); }
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] > 0.f ? x[i] : 0.f) * s;
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
