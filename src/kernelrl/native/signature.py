"""Parse C prototypes of exported kernels into argument specs the caller can check tensors against."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch


class SignatureError(ValueError):
    """A requested function is missing from the source or uses an argument type we cannot pass."""


# Pointer element types -> the torch dtypes a tensor may have to be passed there.
POINTER_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "float": (torch.float32,),
    "double": (torch.float64,),
    "_Float16": (torch.float16,),
    "__half": (torch.float16,),
    "half": (torch.float16,),
    "__nv_bfloat16": (torch.bfloat16,),
    "__bf16": (torch.bfloat16,),
    "int8_t": (torch.int8,),
    "signed char": (torch.int8,),
    "uint8_t": (torch.uint8, torch.bool),
    "unsigned char": (torch.uint8, torch.bool),
    "bool": (torch.bool,),
    "int16_t": (torch.int16,),
    "short": (torch.int16,),
    "uint16_t": (torch.float16, torch.bfloat16, torch.int16),
    "int": (torch.int32,),
    "int32_t": (torch.int32,),
    "unsigned": (torch.int32,),
    "unsigned int": (torch.int32,),
    "uint32_t": (torch.int32,),
    "long": (torch.int64,),
    "long long": (torch.int64,),
    "int64_t": (torch.int64,),
    "uint64_t": (torch.int64,),
    "void": (),  # void*: any dtype
}

# Scalar types -> ctypes type names (resolved in library.py).
SCALAR_CTYPES: dict[str, str] = {
    "float": "c_float",
    "double": "c_double",
    "int": "c_int",
    "int32_t": "c_int32",
    "unsigned": "c_uint",
    "unsigned int": "c_uint",
    "uint32_t": "c_uint32",
    "long": "c_long",
    "long long": "c_longlong",
    "int64_t": "c_int64",
    "uint64_t": "c_uint64",
    "size_t": "c_size_t",
    "ptrdiff_t": "c_ssize_t",
    "bool": "c_bool",
    "char": "c_char",
}

_QUALIFIERS = re.compile(r"\b(const|volatile|restrict|__restrict__|__restrict|struct|std::)\b|std::")


@dataclass(frozen=True)
class ArgSpec:
    """One parameter: `pointer` args take tensors of `dtypes` (empty = any); scalars take numbers."""

    name: str
    base_type: str
    pointer: bool
    mutable: bool


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    return_type: str
    args: tuple[ArgSpec, ...]

    def c_prototype(self, symbol: str) -> str:
        """A C declaration of this function under another symbol, for the extern "C" wrapper."""
        params = ", ".join(_c_param(a) for a in self.args) or "void"
        return f"{self.return_type} {symbol}({params})"


def _c_param(arg: ArgSpec) -> str:
    if arg.pointer:
        return f"{'' if arg.mutable else 'const '}{arg.base_type}* {arg.name}"
    return f"{arg.base_type} {arg.name}"


def _strip_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", lambda m: " " * len(m.group(0)), source, flags=re.S)
    return re.sub(r"//[^\n]*", "", source)


def _parse_param(text: str, index: int, function: str) -> ArgSpec:
    text = " ".join(text.split())
    mutable = not re.search(r"\bconst\b", text.split("*")[0]) if "*" in text else True
    pointer = text.count("*")
    if pointer > 1 or "[" in text or "&" in text:
        raise SignatureError(
            f"{function}: parameter {index + 1} ({text!r}) is not supported; use a plain pointer "
            "(float* x), or a scalar (int64_t n)"
        )
    cleaned = _QUALIFIERS.sub(" ", text.replace("*", " * ")).split()
    if pointer:
        star = cleaned.index("*")
        base, name = " ".join(cleaned[:star]), (cleaned[star + 1] if star + 1 < len(cleaned) else f"arg{index}")
        if base not in POINTER_DTYPES:
            raise SignatureError(
                f"{function}: pointer type {base}* is not supported; known: "
                + ", ".join(f"{t}*" for t in POINTER_DTYPES)
            )
        return ArgSpec(name=name, base_type=base, pointer=True, mutable=mutable)
    base, name = " ".join(cleaned[:-1]), cleaned[-1]
    if len(cleaned) == 1:
        base, name = cleaned[0], f"arg{index}"
    if base not in SCALAR_CTYPES:
        raise SignatureError(
            f"{function}: scalar type {base!r} is not supported; known: {', '.join(SCALAR_CTYPES)}"
        )
    return ArgSpec(name=name, base_type=base, pointer=False, mutable=False)


_NOT_RETURN_TYPE = {"extern", '"C"', "static", "inline", "__inline__", "__host__", "__forceinline__"}


def parse_function(source: str, name: str) -> FunctionSpec:
    """Find the definition of `name` in C/C++/CUDA `source` and parse its prototype."""
    text = _strip_comments(source)
    for match in re.finditer(r"\b" + re.escape(name) + r"\s*\(([^()]*)\)\s*\{", text):
        start = max(text.rfind(c, 0, match.start()) for c in ";{}") + 1
        prefix_lines = [ln for ln in text[start : match.start()].splitlines() if not ln.strip().startswith("#")]
        tokens = [t for t in " ".join(prefix_lines).replace("*", " * ").split() if t not in _NOT_RETURN_TYPE]
        if not tokens or tokens[-1] in ("=", ".", "->", ",", "return"):
            continue  # a call or an expression, not a definition
        if "__global__" in tokens:
            raise SignatureError(
                f"{name!r} is a __global__ kernel; export a host function that launches it instead"
            )
        if "*" in tokens:
            raise SignatureError(f"{name}: pointer return types are not supported (return void or a scalar)")
        return_type = " ".join(tokens)
        if return_type != "void" and return_type not in SCALAR_CTYPES:
            raise SignatureError(f"{name}: return type {return_type!r} is not supported (use void or a scalar)")
        raw = match.group(1).strip()
        params = [] if raw in ("", "void") else raw.split(",")
        args = tuple(_parse_param(p, i, name) for i, p in enumerate(params))
        return FunctionSpec(name=name, return_type=return_type, args=args)
    raise SignatureError(
        f"function {name!r} is not defined in the source (expected a definition `RET {name}(ARGS) {{ ... }}`)"
    )
