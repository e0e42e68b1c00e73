"""Prompt templates per backend: the task, the rules the gym enforces, the kernel helper, the output contract."""

from __future__ import annotations

from typing import Literal

from kernelrl.backend_names import BACKEND_NAMES
from kernelrl.config_system import ConfigModel
from kernelrl.nki.prompt import NKI_RULES
from kernelrl.tasks.task import Task

SYSTEM_PROMPT = (
    "You are an expert performance engineer who writes correct, fast kernels. You replace PyTorch "
    "operators with hand-written kernels and verify your reasoning carefully before answering."
)

COMMON_RULES = """\
Rules (the evaluator enforces them):
- Define `class ModelNew(nn.Module)` at module level. Its constructor takes exactly the same arguments
  as `Model.__init__`; keep the same parameter and buffer names and shapes, so the reference weights
  can be copied into it.
- `ModelNew.forward` takes the same inputs as `Model.forward` and returns outputs of the same shape and
  dtype, equal to the reference within tolerance (float32: rtol = atol = 1e-4) on fresh random inputs.
- The computation must run in your own kernel(s). Do not fall back to the PyTorch operators you are
  replacing (no calling `Model`, `torch.nn.functional` or the same torch ops on the hot path); allocating
  outputs (`torch.empty`) and making inputs contiguous is fine.
- No tricks: do not read the reference, cache results between calls, special-case the test inputs,
  spawn processes or touch files. Your kernel is timed against eager PyTorch; faster is better, but
  correctness comes first."""

BACKEND_HELP = {
    "cpu": """\
Backend: CPU, kernels in C/C++ built with g++ -O3 -march=native -fopenmp (OpenMP pragmas and SIMD
intrinsics are allowed). Build and call them through the kernel helper:

    from kernelrl.native import load_cpp
    SOURCE = r'''
    #include <cstdint>
    void my_kernel(const float* x, float* y, int64_t n, float alpha) { /* ... */ }
    '''
    lib = load_cpp(SOURCE, functions=["my_kernel"])   # built once at import, cached by content
    ...
    y = torch.empty_like(x)
    lib.my_kernel(x.contiguous(), y, x.numel(), 2.0)

- Write plain C/C++ functions returning void (no `extern "C"`, no torch/extension.h, no pybind11).
- Pointer parameters take contiguous CPU tensors whose dtype matches the pointer type (float* takes
  float32, double* float64, int64_t* int64, int* int32); scalar parameters take Python numbers.
- Compiler errors come back with line numbers in your Python file.""",
    "triton": """\
Backend: Triton. Write `@triton.jit` kernels (import triton, triton.language as tl) and launch them from
`ModelNew.forward` with `kernel[grid](...)`. Use fixed block sizes (no `triton.autotune`), masks on
every load and store, and float32 accumulation. Without a GPU the evaluator runs Triton's interpreter:
correctness is checked but the timing is not meaningful.""",
    "cuda": """\
Backend: CUDA C++. Write `__global__` kernels plus a host launcher function (returning void, taking
device pointers and sizes), and build them through the kernel helper:

    from kernelrl.native import load_cuda
    lib = load_cuda(SOURCE, functions=["launch_my_kernel"])
    lib.launch_my_kernel(x.contiguous(), y, x.numel())

- Do not use torch/extension.h or pybind11; the helper exports your host functions directly.
- Pointer parameters take contiguous CUDA tensors of the matching dtype; scalars take Python numbers.
- Without a GPU the source is only compiled with nvcc (compiler errors are reported).""",
    "nki": NKI_RULES + """
Without a Neuron device the evaluator runs kernelrl's NKI interpreter: tile-rule violations come back as
compiler errors with your line, correctness is checked, and speed is an estimated engine cost (notes),
not a measured time. Do not import numpy or compute on the host: return the tensor your kernel stores.""",
}

OUTPUT_CONTRACT = """\
Answer format: think as briefly as you need, then give the complete Python module (imports, kernel
source, ModelNew) in ONE fenced block:

```python
# your complete solution
```

Only the last ```python block of your answer is evaluated."""

TOOLS_CONTRACT = """\
You have tools: `compile` (build your module, report compiler errors), `verify` (compile and check
correctness against the reference) and `profile` (verify and time against eager PyTorch). Call them
as often as you like with the complete module as `code`. When done, answer with the final module in
one ```python fenced block."""


class PromptConfig(ConfigModel):
    """What goes into the first prompt."""

    backend: Literal[BACKEND_NAMES] = "cpu"
    system_prompt: str = SYSTEM_PROMPT
    include_rules: bool = True
    tools: bool = False
    extra_instructions: str = ""


def task_prompt(task: Task, config: PromptConfig | None = None) -> str:
    """The user message that opens an episode for `task`."""
    config = config or PromptConfig()
    if config.backend not in BACKEND_HELP:
        raise ValueError(f"no prompt template for backend {config.backend!r}; known: {', '.join(BACKEND_HELP)}")
    rtol, atol = task.tolerance
    parts = [
        "Write an optimized replacement for this PyTorch reference model (task "
        f"`{task.id}`, dtype {task.dtype}, tolerance rtol={rtol:g} atol={atol:g}):",
        f"```python\n{task.source.strip()}\n```",
    ]
    if config.include_rules:
        parts += [COMMON_RULES, BACKEND_HELP[config.backend]]
    if config.extra_instructions:
        parts.append(config.extra_instructions)
    parts.append(TOOLS_CONTRACT if config.tools else OUTPUT_CONTRACT)
    return "\n\n".join(parts)


def initial_messages(task: Task, config: PromptConfig | None = None) -> list[dict[str, str]]:
    """System plus user message for the first turn."""
    config = config or PromptConfig()
    messages = [{"role": "system", "content": config.system_prompt}] if config.system_prompt else []
    return [*messages, {"role": "user", "content": task_prompt(task, config)}]
