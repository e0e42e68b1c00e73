"""A task's memory footprint and a one-forward check: what the shrinker measures and verifies."""

from __future__ import annotations

import functools
from typing import Any


def estimate_bytes(source: str) -> int:
    """Bytes of inputs + weights + output of the task, measured on the meta device (nothing allocated)."""
    import torch

    namespace: dict[str, Any] = {"__name__": "kernelrl_task_estimate"}
    exec(compile(source, "<task>", "exec"), namespace)
    with torch.device("meta"), _all_on_meta()():
        inputs = namespace["get_inputs"]()
        model = namespace["Model"](*namespace["get_init_inputs"]())
        total = _tensor_bytes(inputs) + sum(p.numel() * p.element_size() for p in model.parameters())
        try:
            total += _tensor_bytes(model(*inputs))
        except Exception:  # an op without a meta kernel: inputs and weights are still a fair estimate
            pass
    return total


@functools.cache
def _all_on_meta() -> type:
    """A torch function mode that builds every factory tensor on the meta device, even one given an
    explicit device (a task's `device='cuda'`): estimating allocates nothing, on any device."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    class AllOnMeta(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = dict(kwargs or {})
            if func in _device_constructors():
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    return AllOnMeta


def _tensor_bytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, list | tuple):
        return sum(_tensor_bytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_tensor_bytes(o) for o in obj.values())
    return 0


def run_once(source: str) -> None:
    """Build the task's Model and run one forward on CPU tensors (no gradients); raises what it raises."""
    import torch

    namespace: dict[str, Any] = {"__name__": "kernelrl_task_check"}
    exec(compile(source, "<task>", "exec"), namespace)
    torch.manual_seed(0)
    with torch.no_grad():
        model = namespace["Model"](*namespace["get_init_inputs"]())
        model(*namespace["get_inputs"]())
