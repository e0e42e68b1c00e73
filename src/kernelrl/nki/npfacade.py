"""The `numpy` an NKI candidate imports: dtype names and ALU-op names, no array and no computation.

NKI kernels import NumPy for `dtype=np.float32` and `op0=np.subtract`; on Trainium these are names the
compiler maps to device types and engine ALU ops. Here `import numpy as np` in candidate source resolves
(while the candidate module is loaded, see `nki_modules`) to this facade: `np.float32` is a dtype token,
`np.subtract` an op token an NKI instruction accepts, and calling a token, or naming anything else
(`np.array`, `np.maximum.reduce`, `np.random`), is an error that says so.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as _np

from kernelrl.nki.rules import fail

DTYPE_NAMES = ("float32", "float16", "int32", "int16", "int8", "uint8", "bool_")
ALU_OPS: dict[str, Any] = {
    "add": _np.add, "subtract": _np.subtract, "multiply": _np.multiply, "divide": _np.divide,
    "true_divide": _np.divide, "maximum": _np.maximum, "minimum": _np.minimum, "power": _np.power,
    "exp": _np.exp, "log": _np.log, "tanh": _np.tanh, "sqrt": _np.sqrt, "abs": _np.abs, "absolute": _np.abs,
    "negative": _np.negative, "square": _np.square, "sign": _np.sign, "sin": _np.sin, "cos": _np.cos,
    "floor": _np.floor, "ceil": _np.ceil, "reciprocal": lambda x: 1.0 / x,
    "greater": lambda a, b: (a > b).astype(_np.float64), "greater_equal": lambda a, b: (a >= b).astype(_np.float64),
    "less": lambda a, b: (a < b).astype(_np.float64), "less_equal": lambda a, b: (a <= b).astype(_np.float64),
    "equal": lambda a, b: (a == b).astype(_np.float64), "not_equal": lambda a, b: (a != b).astype(_np.float64),
    "logical_and": _np.logical_and, "logical_or": _np.logical_or, "bitwise_and": _np.bitwise_and,
    "bitwise_or": _np.bitwise_or, "bitwise_xor": _np.bitwise_xor, "left_shift": _np.left_shift,
    "right_shift": _np.right_shift, "mod": _np.mod,
}


class _Token:
    """A name NKI understands; nothing to compute with on the host."""

    nki_dtype: str | None = None
    nki_op: str | None = None
    _np: Any = None

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *_: Any, **__: Any) -> Any:
        raise fail("err-host-numpy", f"np.{self.name} inside an NKI kernel module names an ALU op or a dtype; it "
                   "computes nothing on the host (pass it as op=/dtype= to an NKI instruction)")

    def __repr__(self) -> str:
        return f"np.{self.name}"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise fail("err-host-numpy", f"np.{self.name}.{attr} is not available to an NKI kernel")


class DTypeToken(_Token):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.nki_dtype = name


class OpToken(_Token):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.nki_op = name
        self._np = ALU_OPS[name]


_OPS = {name: OpToken(name) for name in ALU_OPS}
_DTYPES = {name: DTypeToken(name) for name in DTYPE_NAMES}


def op(name: str) -> OpToken:
    """The op token `np.<name>` (the replay decodes traces with it)."""
    if name not in _OPS:
        raise fail("err-unsupported-op", f"np.{name} is not an ALU op an NKI instruction accepts")
    return _OPS[name]


def op_token(name: Any) -> OpToken | None:
    """The facade's own token named `name`, if any (to recognise a token by identity)."""
    return _OPS.get(name) if isinstance(name, str) else None


class _Facade(ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise fail("err-host-numpy", f"np.{name} is not available inside an NKI kernel module: NumPy there names "
                   f"dtypes ({', '.join(DTYPE_NAMES)}) and ALU ops (np.add, np.subtract, ...), never host arrays")


def facade() -> ModuleType:
    """A fresh facade module to stand in for `numpy` while candidate source is executed."""
    module = _Facade("numpy", "NumPy as an NKI kernel sees it: dtype and ALU-op names only")
    for name, token in (*_OPS.items(), *_DTYPES.items()):
        setattr(module, name, token)
    module.float64 = _DTYPES["float32"]  # type: ignore[attr-defined]  # host float literals; fp32 on the device
    module.__path__ = []  # type: ignore[attr-defined]
    return module
