"""Count calls into compiled extensions, so the pipeline can prove the candidate's own kernel ran.

`kernelrl.native` counts its own calls. Extensions built by torch's `load_inline`/`load` are wrapped
here (by the evaluator, before the candidate is imported) so their functions count too.
"""

from __future__ import annotations

import functools
from typing import Any

from kernelrl.evaluate.guards import LaunchCounter
from kernelrl.native import call_counts
from kernelrl.native.calls import record_call


class CountedExtension:
    """Proxy of a built extension module whose callables record each call."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if callable(value) and not name.startswith("__"):

            @functools.wraps(value)
            def counted(*args: Any, **kwargs: Any) -> Any:
                record_call(name)
                return value(*args, **kwargs)

            return counted
        return value


_INSTALLED = [False]


def install_extension_counter() -> None:
    if _INSTALLED[0]:
        return
    import torch.utils.cpp_extension as cpp_extension

    for name in ("load_inline", "load"):
        original = getattr(cpp_extension, name)

        @functools.wraps(original)
        def wrapped(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            return CountedExtension(__original(*args, **kwargs))

        setattr(cpp_extension, name, wrapped)
    _INSTALLED[0] = True


def kernel_calls_total() -> int:
    return sum(call_counts().values()) + sum(LaunchCounter.launches.values())
