"""Operator registry for task synthesis: torch ops with shape rules, dtype rules and parameter ranges.

Every op is an `OpSpec` registered in `OPS`. Given the current tensor shape (a tuple of `Dim`, each a
source expression and its value), `make` returns a `Step` (module attributes to create, the forward
expression in `x`, the output shape) or None when the op does not apply to that shape. All ops take
and return float32 tensors (`dtypes`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelrl.registry import Registry


@dataclass(frozen=True)
class Dim:
    """One dimension: how the source spells it (`features`, `256`, `height // 2`) and its value."""

    expr: str
    value: int


Shape = tuple[Dim, ...]


@dataclass
class Step:
    """One op applied: `init` lines (attributes, `{i}`-free), the forward expression, the output shape."""

    forward: str
    shape: Shape
    init: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OpSpec:
    name: str
    kind: str  # activation | elementwise | matmul | conv | norm | softmax | reduction | scan | pool | reshape
    ranks: tuple[int, ...]
    make: Callable[[random.Random, Shape, str], Step | None]
    weight: float = 1.0  # relative sampling weight
    terminal: bool = False  # only as the last op (it removes the dimension later ops would work on)
    dtypes: tuple[str, ...] = ("float32",)


OPS: Registry[OpSpec] = Registry("synthesis operator")
KIND_COST = {"activation": 1, "elementwise": 1, "scan": 2, "reduction": 2, "softmax": 2, "norm": 2, "pool": 2,
             "reshape": 0, "matmul": 3, "conv": 3}


def register(spec: OpSpec) -> OpSpec:
    return OPS.register(spec.name)(spec)


def _same(forward: str) -> Callable[[random.Random, Shape, str], Step]:
    return lambda rng, shape, name: Step(forward, shape)


def _unary(name: str, forward: str, kind: str = "activation", weight: float = 1.0) -> None:
    register(OpSpec(name, kind, (2, 3, 4), _same(forward), weight))


for _name, _forward in [
    ("relu", "torch.relu(x)"), ("gelu", "F.gelu(x)"), ("silu", "F.silu(x)"), ("sigmoid", "torch.sigmoid(x)"),
    ("tanh", "torch.tanh(x)"), ("hardswish", "F.hardswish(x)"), ("mish", "F.mish(x)"), ("elu", "F.elu(x)"),
    ("softsign", "F.softsign(x)"),
]:
    _unary(_name, _forward)
_unary("abs", "torch.abs(x)", "elementwise", 0.5)
_unary("square", "x * x", "elementwise", 0.5)


def _param(lo: float, hi: float, digits: int = 2) -> Callable[[random.Random], float]:
    return lambda rng: round(rng.uniform(lo, hi), digits)


def _leaky(rng: random.Random, shape: Shape, name: str) -> Step:
    return Step(f"F.leaky_relu(x, {_param(0.01, 0.3)(rng)})", shape)


def _softplus(rng: random.Random, shape: Shape, name: str) -> Step:
    return Step(f"F.softplus(x, beta={_param(0.5, 2.0, 1)(rng)})", shape)


def _clamp(rng: random.Random, shape: Shape, name: str) -> Step:
    return Step(f"torch.clamp(x, {-_param(0.1, 2.0)(rng)}, {_param(0.1, 2.0)(rng)})", shape)


def _scale(rng: random.Random, shape: Shape, name: str) -> Step:
    return Step(f"x * {_param(0.25, 3.0)(rng)}", shape)


def _bias(rng: random.Random, shape: Shape, name: str) -> Step:
    size = shape[1].expr if len(shape) == 4 else shape[-1].expr
    view = ".view(-1, 1, 1)" if len(shape) == 4 else ""
    return Step(f"x + self.{name}{view}", shape, [f"self.{name} = nn.Parameter(torch.randn({size}) * 0.1)"])


register(OpSpec("leaky_relu", "activation", (2, 3, 4), _leaky))
register(OpSpec("softplus", "activation", (2, 3, 4), _softplus))
register(OpSpec("clamp", "elementwise", (2, 3, 4), _clamp))
register(OpSpec("scale", "elementwise", (2, 3, 4), _scale, 0.5))
register(OpSpec("bias_add", "elementwise", (2, 3, 4), _bias))


def _linear(rng: random.Random, shape: Shape, name: str) -> Step:
    out = rng.choice([64, 128, 256, 384, 512])
    bias = "" if rng.random() < 0.8 else ", bias=False"
    return Step(f"self.{name}(x)", (*shape[:-1], Dim(str(out), out)), [f"self.{name} = nn.Linear({shape[-1].expr}, {out}{bias})"])


def _gram(rng: random.Random, shape: Shape, name: str) -> Step | None:
    if shape[1].value > 256:
        return None
    return Step(f"torch.bmm(x, x.transpose(1, 2)) / {shape[-1].value ** 0.5:.4f}", (shape[0], shape[1], shape[1]))


register(OpSpec("linear", "matmul", (2, 3), _linear, 2.5))
register(OpSpec("gram", "matmul", (3,), _gram, 0.7))


def _layernorm(rng: random.Random, shape: Shape, name: str) -> Step:
    return Step(f"self.{name}(x)", shape, [f"self.{name} = nn.LayerNorm({shape[-1].expr})"])


def _batchnorm1d(rng: random.Random, shape: Shape, name: str) -> Step:
    return Step(f"self.{name}(x)", shape, [f"self.{name} = nn.BatchNorm1d({shape[-1].expr})"])


def _batchnorm2d(rng: random.Random, shape: Shape, name: str) -> Step:
    return Step(f"self.{name}(x)", shape, [f"self.{name} = nn.BatchNorm2d({shape[1].expr})"])


def _groupnorm(rng: random.Random, shape: Shape, name: str) -> Step | None:
    groups = [g for g in (2, 4, 8) if shape[1].value % g == 0 and g < shape[1].value]
    if not groups:
        return None
    return Step(f"self.{name}(x)", shape, [f"self.{name} = nn.GroupNorm({rng.choice(groups)}, {shape[1].expr})"])


def _last_dim_op(forward: str, min_size: int = 2) -> Callable[[random.Random, Shape, str], Step | None]:
    return lambda rng, shape, name: Step(forward, shape) if shape[-1].value >= min_size else None


register(OpSpec("layernorm", "norm", (2, 3), _layernorm, 1.5))
register(OpSpec("rmsnorm", "norm", (2, 3), _last_dim_op("x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)")))
register(OpSpec("l2_normalize", "norm", (2, 3), _last_dim_op("F.normalize(x, dim=-1)"), 0.7))
register(OpSpec("batchnorm1d", "norm", (2,), _batchnorm1d, 0.7))
register(OpSpec("batchnorm2d", "norm", (4,), _batchnorm2d))
register(OpSpec("groupnorm", "norm", (4,), _groupnorm))
register(OpSpec("instance_norm", "norm", (4,), _same("F.instance_norm(x)"), 0.5))
register(OpSpec("softmax", "softmax", (2, 3), _last_dim_op("torch.softmax(x, dim=-1)"), 1.5))
register(OpSpec("log_softmax", "softmax", (2, 3), _last_dim_op("torch.log_softmax(x, dim=-1)")))
register(OpSpec("channel_softmax", "softmax", (4,), _same("torch.softmax(x, dim=1)"), 0.5))
register(OpSpec("cumsum", "scan", (2, 3), _last_dim_op("torch.cumsum(x, dim=-1)"), 0.7))


def _reduce(forward: str) -> Callable[[random.Random, Shape, str], Step | None]:
    return lambda rng, shape, name: Step(forward, shape[:-1]) if shape[-1].value >= 2 else None


for _name, _forward in [
    ("sum", "x.sum(dim=-1)"), ("mean", "x.mean(dim=-1)"), ("amax", "x.amax(dim=-1)"),
    ("logsumexp", "torch.logsumexp(x, dim=-1)"), ("norm", "torch.linalg.vector_norm(x, dim=-1)"),
]:
    register(OpSpec(_name, "reduction", (2, 3), _reduce(_forward), 0.5, terminal=True))


def _conv(kernel: int, depthwise: bool = False) -> Callable[[random.Random, Shape, str], Step]:
    def make(rng: random.Random, shape: Shape, name: str) -> Step:
        c = shape[1]
        out = c if depthwise else Dim(*(lambda v: (str(v), v))(rng.choice([8, 16, 32])))
        groups = f", groups={c.expr}" if depthwise else ""
        pad = f", padding={kernel // 2}" if kernel > 1 else ""
        init = f"self.{name} = nn.Conv2d({c.expr}, {out.expr}, {kernel}{pad}{groups})"
        return Step(f"self.{name}(x)", (shape[0], out, shape[2], shape[3]), [init])

    return make


def _pool(kind: str) -> Callable[[random.Random, Shape, str], Step | None]:
    def make(rng: random.Random, shape: Shape, name: str) -> Step | None:
        h, w = shape[2], shape[3]
        if h.value < 8 or w.value < 8:
            return None
        half = (Dim(f"{h.expr} // 2" if h.expr.isidentifier() else str(h.value // 2), h.value // 2),
                Dim(f"{w.expr} // 2" if w.expr.isidentifier() else str(w.value // 2), w.value // 2))
        return Step(f"F.{kind}_pool2d(x, 2)", (shape[0], shape[1], *half))

    return make


def _flatten(rng: random.Random, shape: Shape, name: str) -> Step | None:
    size = shape[1].value * shape[2].value * shape[3].value
    if size > 8192:
        return None
    return Step("x.flatten(1)", (shape[0], Dim(str(size), size)))


register(OpSpec("conv3x3", "conv", (4,), _conv(3), 2.0))
register(OpSpec("conv1x1", "conv", (4,), _conv(1)))
register(OpSpec("depthwise_conv3x3", "conv", (4,), _conv(3, depthwise=True)))
register(OpSpec("max_pool", "pool", (4,), _pool("max")))
register(OpSpec("avg_pool", "pool", (4,), _pool("avg"), 0.7))
register(OpSpec("global_avg_pool", "pool", (4,), lambda rng, shape, name: Step("x.mean(dim=(2, 3))", shape[:2]), 0.7))
register(OpSpec("flatten", "reshape", (4,), _flatten, 0.3))
register(OpSpec("seq_mean", "reduction", (3,), lambda rng, shape, name: Step("x.mean(dim=1)", (shape[0], shape[2])), 0.5))

