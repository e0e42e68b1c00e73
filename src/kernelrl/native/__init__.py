"""The kernel helper that candidates import: build C/C++ (gcc) or CUDA (nvcc) kernels, call them on tensors.

    from kernelrl.native import load_cpp
    lib = load_cpp(SOURCE, functions=["relu"])
    lib.relu(x, out, x.numel())

No `torch/extension.h`: a small kernel builds in well under a second, and builds are cached by
content hash, so an identical kernel never rebuilds. This package imports nothing else of kernelrl.
"""

from kernelrl.native.build import CompileError, build_shared_library, cache_dir
from kernelrl.native.calls import call_counts, reset_call_counts
from kernelrl.native.library import KernelLibrary, load_cpp, load_cuda
from kernelrl.native.signature import SignatureError

__all__ = [
    "CompileError",
    "KernelLibrary",
    "SignatureError",
    "build_shared_library",
    "cache_dir",
    "call_counts",
    "load_cpp",
    "load_cuda",
    "reset_call_counts",
]
