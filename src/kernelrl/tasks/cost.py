"""A deterministic runtime estimate for a task's eager forward, from what it computes, not from a clock.

Filters that must give the same answer on every machine and under any load (the synthesis runtime
window: same seed, same tasks) use this instead of a measured time. Work is counted per aten op under
a dispatch mode: floating-point operations of matmuls and convolutions (torch's flop counter) and elements
produced by every other op, priced per op on a fixed reference machine: one CPU core of about this
project's CI machine (constants below, measured per op on synthesized tasks). It ranks and windows
tasks; it does not predict any real machine's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLOPS_PER_MS = 30e6  # ~30 GFLOP/s: one core's single-precision GEMM/convolution (torch's flop counter)
ELEMENT_NS = 0.6  # an element of a plain elementwise, reduction or copy op (memory bound; the larger of in and out)
OP_MS = 0.004  # ~4 us: eager dispatch of one aten op
#: Element costs of ops slower than memory on one core (transcendental math, windows, scans).
SLOW_ELEMENT_NS = {
    "aten::gelu": 21.0, "aten::mish": 15.0, "aten::avg_pool2d": 29.0, "aten::max_pool2d_with_indices": 8.0,
    "aten::_log_softmax": 6.0, "aten::sigmoid": 3.5, "aten::hardswish": 3.3, "aten::cumsum": 2.7,
    "aten::softplus": 2.1, "aten::elu": 1.6, "aten::_softmax": 1.2, "aten::native_layer_norm": 2.0,
    "aten::silu": 0.75, "aten::tanh": 0.7, "aten::erf": 3.0, "aten::exp": 1.0, "aten::log": 1.0,
}
#: Ops that move no data (views and metadata); matmuls and convolutions are priced by their flops.
FREE_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::t", "aten::transpose", "aten::expand", "aten::detach",
    "aten::permute", "aten::reshape", "aten::unsqueeze", "aten::squeeze", "aten::as_strided", "aten::alias",
    "aten::slice", "aten::select", "aten::flatten", "aten::unflatten", "aten::split", "aten::chunk",
})
FLOP_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution"})


@dataclass(frozen=True)
class Work:
    """What one forward computes: matmul/convolution flops, the other ops' output elements priced in
    reference nanoseconds, and aten ops dispatched."""

    flops: int
    element_ns: float
    ops: int

    @property
    def estimated_ms(self) -> float:
        return self.flops / FLOPS_PER_MS + self.element_ns / 1e6 + self.ops * OP_MS


def count_work(model: Any, inputs: list[Any]) -> Work:
    """Run `model(*inputs)` once under torch's flop counter and a byte-counting dispatch mode."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import FlopCounterMode

    class _Elements(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.element_ns, self.ops = 0.0, 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            name = func._schema.name
            if name not in FREE_OPS:
                self.ops += 1
                if name not in FLOP_OPS:
                    elements = max(_elements(out), _elements((args, kwargs)))  # a reduction reads more
                    self.element_ns += elements * SLOW_ELEMENT_NS.get(name, ELEMENT_NS)
            return out

    def _elements(tree: Any) -> int:
        return sum(t.numel() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))

    flops = FlopCounterMode(display=False)
    counter = _Elements()
    with torch.no_grad(), flops, counter:
        model(*inputs)
    return Work(int(flops.get_total_flops()), counter.element_ns, counter.ops)
