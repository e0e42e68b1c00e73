"""Load a built kernel library and expose its functions as Python callables that take tensors."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import torch

from kernelrl.native.build import build_shared_library
from kernelrl.native.calls import record_call
from kernelrl.native.signature import POINTER_DTYPES, SCALAR_CTYPES, FunctionSpec, parse_function

WRAPPER_PREFIX = "__kernelrl_"
_LOADED: dict[tuple, KernelLibrary] = {}


class KernelFunction:
    """A C function taking tensors (as pointers) and numbers, with its arguments checked on each call."""

    def __init__(self, spec: FunctionSpec, cfunc: Any, device_type: str) -> None:
        self.spec = spec
        self.device_type = device_type
        self._cfunc = cfunc
        cfunc.argtypes = [
            ctypes.c_void_p if a.pointer else getattr(ctypes, SCALAR_CTYPES[a.base_type]) for a in spec.args
        ]
        cfunc.restype = None if spec.return_type == "void" else getattr(ctypes, SCALAR_CTYPES[spec.return_type])

    def __call__(self, *args: Any) -> Any:
        spec = self.spec
        if len(args) != len(spec.args):
            raise TypeError(f"{spec.name}() takes {len(spec.args)} arguments ({len(args)} given)")
        converted: list[Any] = []
        for arg, value in zip(spec.args, args, strict=True):
            if arg.pointer:
                converted.append(self._pointer(arg.name, arg.base_type, value))
            elif isinstance(value, torch.Tensor):
                converted.append(value.item())
            else:
                converted.append(value)
        record_call(spec.name)
        return self._cfunc(*converted)

    def _pointer(self, name: str, base_type: str, value: Any) -> int:
        fn = self.spec.name
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{fn}(): argument {name!r} is a {base_type}* and needs a tensor, got {type(value).__name__}")
        if value.device.type != self.device_type:
            raise ValueError(f"{fn}(): tensor {name!r} is on {value.device}, the kernel needs {self.device_type}")
        if not value.is_contiguous():
            raise ValueError(f"{fn}(): tensor {name!r} is not contiguous; pass x.contiguous()")
        allowed = POINTER_DTYPES[base_type]
        if allowed and value.dtype not in allowed:
            names = " or ".join(str(d) for d in allowed)
            raise TypeError(f"{fn}(): tensor {name!r} has dtype {value.dtype}, {base_type}* needs {names}")
        return value.data_ptr()

    def __repr__(self) -> str:
        return f"<kernel {self.spec.c_prototype(self.spec.name)}>"


class KernelLibrary:
    """A built shared library; each requested function is an attribute (`lib.relu(x, out, n)`)."""

    def __init__(self, path: str, specs: Sequence[FunctionSpec], device_type: str) -> None:
        self.path = path
        self._dll = ctypes.CDLL(path)
        self.functions: dict[str, KernelFunction] = {
            s.name: KernelFunction(s, getattr(self._dll, WRAPPER_PREFIX + s.name), device_type) for s in specs
        }

    def __getattr__(self, name: str) -> KernelFunction:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"kernel library has no function {name!r}; exported: {', '.join(functions)}")


def _with_wrappers(source: str, specs: Sequence[FunctionSpec]) -> str:
    """Append extern "C" forwarding wrappers, so kernels need no extern "C" and C++ names never mangle."""
    lines = [source, "", "// kernelrl: exported entry points"]
    for spec in specs:
        call = f"{spec.name}({', '.join(a.name for a in spec.args)})"
        body = call if spec.return_type == "void" else f"return {call}"
        lines.append(f'extern "C" {spec.c_prototype(WRAPPER_PREFIX + spec.name)} {{ {body}; }}')
    return "\n".join(lines) + "\n"


def _load(source: str, functions: Sequence[str], language: str, extra_flags: Sequence[str]) -> KernelLibrary:
    if isinstance(functions, str):
        functions = [functions]
    if not functions:
        raise ValueError("name at least one function to export, e.g. functions=['my_kernel']")
    key = (source, tuple(functions), language, tuple(extra_flags))
    if key in _LOADED:
        return _LOADED[key]
    specs = [parse_function(source, name) for name in functions]
    path = build_shared_library(_with_wrappers(source, specs), language, tuple(extra_flags))
    library = KernelLibrary(str(path), specs, "cuda" if language == "cuda" else "cpu")
    _LOADED[key] = library
    return library


def load_cpp(source: str, functions: Sequence[str], extra_flags: Sequence[str] = ()) -> KernelLibrary:
    """Build C/C++ `source` with g++ (-O3 -march=native -fopenmp) and return its `functions`.

    Pointer parameters take contiguous CPU tensors of the matching dtype (float* -> float32,
    int64_t* -> int64, ...); scalar parameters take Python numbers.
    """
    return _load(source, functions, "c++", extra_flags)


def load_cuda(source: str, functions: Sequence[str], extra_flags: Sequence[str] = ()) -> KernelLibrary:
    """Build CUDA `source` with nvcc and return its host `functions` (which launch the kernels).

    Pointer parameters take contiguous CUDA tensors of the matching dtype.
    """
    return _load(source, functions, "cuda", extra_flags)
