"""Candidate sources used by the evaluation tests (good ones and every kind of bad input)."""

RELU_TASK = '''
import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return [2.0]
'''

KERNEL = r'''
void scaled_relu(const float* x, float* y, long n, float s) {
    for (long i = 0; i < n; ++i) y[i] = (x[i] > 0 ? x[i] : 0) * s;
}
'''

GOOD = f'''
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp(r"""{KERNEL}""", ["scaled_relu"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        lib.scaled_relu(x.contiguous(), y, x.numel(), self.scale)
        return y
'''


def forward_body(body: str, imports: str = "", init: str = "self.scale = scale") -> str:
    """A candidate whose forward is `body` (indented 8 spaces)."""
    return f'''
import torch
import torch.nn as nn
{imports}

class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        {init}

    def forward(self, x):
{body}
'''


SYNTAX_ERROR = "import torch\nclass ModelNew(nn.Module)\n    pass\n"
NO_MODEL_NEW = "import torch\nclass Model2(torch.nn.Module):\n    pass\n"
WRONG_SIGNATURE = GOOD.replace("def __init__(self, scale: float):", "def __init__(self, scale, extra):")
WRONG_SHAPE = forward_body("        return torch.relu(x)[:-1] * self.scale")
WRONG_DTYPE = forward_body("        return (torch.relu(x) * self.scale).double()")
WRONG_TYPE = forward_body("        return 'not a tensor'")
WRONG_VALUES = forward_body("        return torch.relu(x) * self.scale + 1e-2")
RAISES = forward_body("        raise ValueError('boom in forward')")
INFINITE_LOOP = forward_body("        while True:\n            pass")
HUGE_ALLOCATION = forward_body("        big = torch.ones(64 * 2**30 // 4)\n        return big[: x.numel()]")
PRINTS_MEGABYTES = forward_body(  # 4 MiB on the first call (timing makes hundreds of calls)
    "        if not hasattr(self, 'said'):\n            self.said = print('x' * 2**22)\n        return torch.relu(x) * self.scale"
)
NON_UTF8_OUTPUT = forward_body(
    "        import sys\n        sys.stdout.buffer.write(b'\\xff\\xfe\\x80 not utf-8\\n')\n"
    "        sys.stdout.flush()\n        return torch.relu(x) * self.scale"
)
SEGFAULT_KERNEL = GOOD.replace(
    "for (long i = 0; i < n; ++i) y[i] = (x[i] > 0 ? x[i] : 0) * s;",
    "volatile float* p = nullptr; for (long i = 0; i < n; ++i) p[i * 1000003] = x[i];",
)
EXIT_EARLY = forward_body("        import os\n        os._exit(0)")
C_COMPILE_ERROR = GOOD.replace("y[i] = (x[i] > 0 ? x[i] : 0) * s;", "y[i] = undefined_symbol;")
KERNEL_WRONG_VALUES = GOOD.replace("(x[i] > 0 ? x[i] : 0) * s;", "(x[i] > 0 ? x[i] : 0) * s + 0.5f;")
