"""Random composition of registered ops into KernelBench-format `Model` sources with consistent shapes."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from kernelrl.tasks.synth.ops import KIND_COST, OPS, Dim, OpSpec, Shape, Step

# Input families: the module-level size constants and the values they are drawn from (CPU-sized).
FAMILIES: dict[str, dict[str, list[int]]] = {
    "vector": {"batch_size": [256, 512, 1024], "features": [512, 1024, 2048]},
    "sequence": {"batch_size": [8, 16, 32], "seq_len": [64, 128], "dim": [128, 256]},
    "image": {"batch_size": [8, 16], "channels": [8, 16, 32], "height": [32, 64], "width": [32, 64]},
}
FAMILY_WEIGHTS = {"vector": 0.45, "sequence": 0.25, "image": 0.3}
GPU_BATCH_FACTOR = 16


@dataclass
class SynthTask:
    """A composed task: its ops, KernelBench-format source and tags."""

    name: str
    family: str
    ops: list[str]
    kinds: list[str]
    sizes: dict[str, int]
    source: str
    difficulty: str
    tags: list[str] = field(default_factory=list)

    @property
    def level(self) -> int:
        return 1 if len(self.ops) == 1 else 2

    @property
    def op_signature(self) -> str:
        return f"{self.family}:" + ">".join(self.ops)


def difficulty(kinds: list[str]) -> str:
    """easy / medium / hard from the summed cost of the op kinds (elementwise 1, reductions 2, matmul 3)."""
    score = sum(KIND_COST.get(k, 1) for k in kinds)
    return "easy" if score <= 2 else "medium" if score <= 5 else "hard"


def _choose(rng: random.Random, specs: list[OpSpec]) -> OpSpec:
    return rng.choices(specs, weights=[s.weight for s in specs])[0]


def compose(rng: random.Random, max_ops: int = 4, name: str = "synth", family: str | None = None) -> SynthTask:
    """Draw an input family and sizes, then 1..max_ops ops whose shape rules accept the running shape."""
    family = family or rng.choices(list(FAMILY_WEIGHTS), weights=list(FAMILY_WEIGHTS.values()))[0]
    sizes = {k: rng.choice(v) for k, v in FAMILIES[family].items()}
    shape: Shape = tuple(Dim(k, v) for k, v in sizes.items())
    count = rng.randint(2, max_ops) if max_ops >= 2 and rng.random() < 0.85 else 1  # mostly fused
    steps: list[tuple[OpSpec, Step]] = []
    for index in range(count):
        last = index == count - 1
        specs = [OPS.get(n) for n in OPS.names()]
        specs = [s for s in specs if len(shape) in s.ranks and (last or not s.terminal)]
        for _ in range(20):
            spec = _choose(rng, specs)
            step = spec.make(rng, shape, f"{spec.name}{index}")
            if step is not None:
                break
        else:
            break
        if steps and steps[-1][0].name == spec.name and spec.kind in ("activation", "norm", "softmax"):
            continue  # relu(relu(x)) and friends add nothing
        steps.append((spec, step))
        shape = step.shape
    if not steps:
        spec = OPS.get("relu")
        steps = [(spec, spec.make(rng, shape, "relu0"))]  # type: ignore[list-item]
    ops = [spec.name for spec, _ in steps]
    kinds = [spec.kind for spec, _ in steps]
    tags = [*sorted({k for k in kinds if k != "reshape"}), "synthetic", "fused" if len(ops) > 1 else "single-op"]
    task = SynthTask(name, family, ops, kinds, sizes, "", difficulty(kinds), tags)
    task.source = render(task, [step for _, step in steps])
    return task


def render(task: SynthTask, steps: list[Step]) -> str:
    """KernelBench-format source text for a composed task."""
    meta = {
        "id": f"synth/{task.name}",
        "level": task.level,
        "tags": [*task.tags, f"difficulty:{task.difficulty}"],
        "profiles": {"gpu": {"batch_size": task.sizes["batch_size"] * GPU_BATCH_FACTOR}},
        "notes": "synthesized: " + " -> ".join(task.ops),
    }
    init = [line for step in steps for line in step.init]
    body = [f"        x = {step.forward}" for step in steps]
    uses_f = any("F." in s.forward for s in steps)
    shape_args = ", ".join(task.sizes)
    lines = [
        f'"""Synthesized task ({task.family} input): {" -> ".join(task.ops)}."""',
        "",
        "import torch",
        "import torch.nn as nn",
        *(["import torch.nn.functional as F"] if uses_f else []),
        "",
        f"TASK_META = {json.dumps(meta)}",
        "",
        *(f"{k} = {v}" for k, v in task.sizes.items()),
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self) -> None:",
        "        super().__init__()",
        *(f"        {line}" for line in init),
        "",
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:",
        *body,
        "        return x",
        "",
        "",
        "def get_inputs():",
        f"    return [torch.randn({shape_args})]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(lines)
