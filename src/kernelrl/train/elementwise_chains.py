"""The tiny model's task family: fused elementwise chains, judged as real compiled C kernels.

A task is a chain of cheap elementwise ops, e.g. ``mul 2.0 | add 0.5 | relu``. Its reference is a
KernelBench-format `Model` doing one eager PyTorch op per link (one memory pass each); the model's
answer is the body of a C loop (one statement per op, on ``float v``), and `candidate_source` wraps
it into a full legal `ModelNew` that builds it with `kernelrl.native.load_cpp` and calls it, so the
gym compiles, checks and times a real kernel. Each op has more than one correct C form (a ternary
or a libm call), so a policy can also drift between forms that compile to faster or slower code.
Solutions are generated programmatically (`solution`), which gives SFT data for any chain.

Hybrid mode (``task.hybrid``; the gym with ``torch_ops="allow"``, KernelGYM's default): an answer is
a sequence of statements, each either a C statement on ``v`` or an eager PyTorch line on ``x``
(``x = torch.relu(x);``, the op's `Op.torch_stmt`). `hybrid_candidate_source` compiles each run of
consecutive C statements into one loop kernel and leaves the PyTorch lines in ``forward`` between the
kernel calls, so an answer may leave part of the chain to torch: the *lazy optimisation* of Dr. Kernel
(Liu et al. 2025, "Dr. Kernel: Reinforcement Learning Done Right for Triton Kernel Generations"), a
correct kernel whose time is mostly spent in libtorch, which the gym's time-based coverage exposes.
`lazy_solution` writes such answers (one op in C, the rest in torch) for SFT data.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass

from kernelrl.tasks.loaders import task_from_source
from kernelrl.tasks.task import Task

CONSTS = ("0.5", "2.0", "3.0")


@dataclass(frozen=True)
class Op:
    """One link: its prompt word, the eager PyTorch statement on ``x`` and its C forms on ``v``."""

    word: str
    torch_stmt: str
    c_forms: tuple[str, ...]


def _ops() -> dict[str, Op]:
    ops = {
        "relu": Op("relu", "x = torch.relu(x)", ("v = v > 0.0f ? v : 0.0f;", "v = fmaxf(v, 0.0f);")),
        "abs": Op("abs", "x = torch.abs(x)", ("v = fabsf(v);", "v = v < 0.0f ? -v : v;")),
        "neg": Op("neg", "x = torch.neg(x)", ("v = -v;",)),
        "square": Op("square", "x = x * x", ("v = v * v;",)),
        "clamp": Op("clamp", "x = torch.clamp(x, -1.0, 1.0)",
                    ("v = v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v);", "v = fminf(fmaxf(v, -1.0f), 1.0f);")),
    }
    for c in CONSTS:
        ops[f"add {c}"] = Op(f"add {c}", f"x = x + {c}", (f"v = v + {c}f;",))
        ops[f"mul {c}"] = Op(f"mul {c}", f"x = x * {c}", (f"v = v * {c}f;",))
        ops[f"sub {c}"] = Op(f"sub {c}", f"x = x - {c}", (f"v = v - {c}f;",))
    return ops


OPS: dict[str, Op] = _ops()

REFERENCE = '''"""Fused elementwise chain: {chain}."""

import torch
import torch.nn as nn

TASK_META = {{"id": "{task_id}", "level": 1, "tags": ["elementwise", "fusion", "tiny-family"]}}

rows = {rows}
cols = {cols}


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
{body}
        return x


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>

void fused_chain(const float* x, float* y, int64_t n) {{
    for (int64_t i = 0; i < n; ++i) {{
        float v = x[i];
        {body}
        y[i] = v;
    }}
}}
"""

lib = load_cpp(SOURCE, functions=["fused_chain"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.fused_chain(x, y, x.numel())
        return y
'''


def chain_id(chain: tuple[str, ...]) -> str:
    return "tiny/" + "_".join(w.replace(" ", "").replace(".", "p") for w in chain)


def prompt_text(chain: tuple[str, ...]) -> str:
    """What the tiny model reads: the op chain and a cue for the kernel body."""
    return "ops: " + " | ".join(chain) + "\nkernel:"


def solution(chain: tuple[str, ...], rng: random.Random | None = None) -> str:
    """A correct answer (C loop body); with `rng`, each op's C form is drawn at random."""
    forms = [OPS[w].c_forms[rng.randrange(len(OPS[w].c_forms))] if rng else OPS[w].c_forms[0] for w in chain]
    return " " + " ".join(forms)


def reference_source(chain: tuple[str, ...], rows: int, cols: int) -> str:
    body = "\n".join("        " + OPS[w].torch_stmt for w in chain)
    return REFERENCE.format(chain=" | ".join(chain), task_id=chain_id(chain), rows=rows, cols=cols, body=body)


def make_task(chain: tuple[str, ...], rows: int = 512, cols: int = 1024) -> Task:
    """The gym `Task` of a chain (KernelBench format, fp32 tolerances)."""
    return task_from_source(reference_source(chain, rows, cols), chain_id(chain), f"<tiny family {chain_id(chain)}>",
                            level=1)


def candidate_source(answer: str) -> str:
    """The full candidate for an answer: the answer up to its end marker, as the C loop body."""
    body = answer.split("</s>")[0].strip()
    return CANDIDATE.format(body=body.replace("\n", " "))


TORCH_LINE = re.compile(r"^x = [A-Za-z0-9_.()+\-*/, ]+$")

HYBRID_CANDIDATE = '''import torch
import torch.nn as nn

from kernelrl.native import load_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
{kernels}
"""

lib = load_cpp(SOURCE, functions=[{names}])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
{body}
        return x
'''

KERNEL = """
void {name}(const float* x, float* y, int64_t n) {{
    for (int64_t i = 0; i < n; ++i) {{
        float v = x[i];
        {body}
        y[i] = v;
    }}
}}
"""

CALL = """        y = torch.empty_like(x)
        lib.{name}(x, y, x.numel())
        x = y"""


def torch_answer(word: str) -> str:
    """The hybrid answer's PyTorch form of one op (a statement on ``x``, ended by ``;``)."""
    return OPS[word].torch_stmt + ";"


def answer_statements(answer: str) -> list[str]:
    """The statements of an answer up to its end marker: split at ``;``, whitespace collapsed."""
    body = answer.split("</s>")[0].replace("\n", " ")
    return [" ".join(p.split()) for p in body.split(";") if p.strip()]


def is_torch_statement(stmt: str) -> bool:
    """A statement on ``x`` (left to PyTorch in hybrid mode) rather than a C statement on ``v``."""
    return stmt.startswith("x ") or stmt.startswith("x=")


def hybrid_candidate_source(answer: str) -> str:
    """The full hybrid candidate: runs of C statements become loop kernels (``seg0``, ``seg1``, ...)
    called in order, PyTorch statements (``x = <expr>``, a restricted character set; anything else
    is passed through as C and fails to build) stay in ``forward`` between them. An answer with no C
    statement still gets one identity kernel, so a kernel of its own is always called (the gym rejects
    a forward that calls none)."""
    segments: list[tuple[str, list[str]]] = []  # ("c" | "torch", statements)
    for stmt in answer_statements(answer):
        kind = "torch" if is_torch_statement(stmt) and TORCH_LINE.match(stmt) else "c"
        if segments and segments[-1][0] == kind and kind == "c":
            segments[-1][1].append(stmt)
        else:
            segments.append((kind, [stmt]))
    if not any(kind == "c" for kind, _ in segments):
        segments.append(("c", []))
    kernels, names, lines = [], [], []
    for kind, stmts in segments:
        if kind == "torch":
            lines.append("        " + stmts[0])
            continue
        name = f"seg{len(names)}"
        names.append(name)
        kernels.append(KERNEL.format(name=name, body=" ".join(s + ";" for s in stmts)))
        lines.append(CALL.format(name=name))
    return HYBRID_CANDIDATE.format(kernels="".join(kernels), names=", ".join(f'"{n}"' for n in names),
                                   body="\n".join(lines))


MISTAKES = ("drop_op", "wrong_op", "swap_ops", "no_semicolon")  # first drafts of feedback-then-fix turns


def applicable(chain: tuple[str, ...]) -> tuple[str, ...]:
    """The `MISTAKES` that change `chain`'s answer (swapping needs two different neighbours)."""
    return tuple(m for m in MISTAKES if m != "swap_ops" or len(chain) > 1)


def corrupt(chain: tuple[str, ...], kind: str, rng: random.Random) -> str:
    """A correct answer (`solution`, forms drawn with `rng`) with one mistake of `kind` (`MISTAKES`): an op left
    out, one op replaced by another, two neighbours swapped, or a statement's semicolon missing (a compile
    error). The first three usually compute something else (the gym says ``incorrect``); a mistake that happens
    to be harmless (relu dropped before abs) is judged correct and left out by `TinyFamily.fix_pairs`."""
    forms = [OPS[w].c_forms[rng.randrange(len(OPS[w].c_forms))] for w in chain]
    k = rng.randrange(len(forms))
    if kind == "drop_op":
        del forms[k]
    elif kind == "wrong_op":
        forms[k] = OPS[rng.choice(sorted(w for w in OPS if w != chain[k]))].c_forms[0]
    elif kind == "swap_ops":
        k = rng.randrange(len(forms) - 1)
        forms[k], forms[k + 1] = forms[k + 1], forms[k]
    elif kind == "no_semicolon":
        forms[k] = forms[k].rstrip(";")
    else:
        raise ValueError(f"unknown mistake {kind!r}; one of {', '.join(MISTAKES)}")
    return " " + " ".join(forms)


def lazy_solution(chain: tuple[str, ...], rng: random.Random | None = None, *, own: int = 1) -> str:
    """A correct lazy answer: `own` ops (the last ones) written in C, the others left to PyTorch."""
    k = max(0, len(chain) - own)
    parts = [torch_answer(w) for w in chain[:k]]
    parts += [OPS[w].c_forms[rng.randrange(len(OPS[w].c_forms))] if rng else OPS[w].c_forms[0] for w in chain[k:]]
    return " " + " ".join(parts)


def split_chains(
    *, seed: int, min_len: int = 2, max_len: int = 4, n_train: int = 256, n_heldout: int = 16,
) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """Disjoint train and held-out chains (held-out: compositions never seen in training).

    Chains have `min_len`..`max_len` ops, no op twice in a row. Deterministic in `seed`.
    """
    rng = random.Random(seed)
    words = sorted(OPS)
    seen: set[tuple[str, ...]] = set()
    out: list[tuple[str, ...]] = []
    while len(out) < n_train + n_heldout:
        n = rng.randint(min_len, max_len)
        chain = [rng.choice(words)]
        while len(chain) < n:
            w = rng.choice(words)
            if w != chain[-1]:
                chain.append(w)
        key = tuple(chain)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out[n_heldout:], out[:n_heldout]


def tokenizer_corpus(hybrid: bool = False) -> list[str]:
    """Texts the tiny tokenizer is trained on: every op word and C form, in prompt/answer context
    (with `hybrid`, the PyTorch forms and lazy answers too)."""
    texts = [f"\nresult: {status}\nfix:" for status in ("incorrect", "compile_error", "runtime_error")] * 20
    for a, b in itertools.product(sorted(OPS), repeat=2):
        texts.append(prompt_text((a, b)) + solution((a, b)) + "\n")
        texts.append(" " + " ".join(OPS[a].c_forms + OPS[b].c_forms))
        if hybrid:
            texts.append(prompt_text((a, b)) + lazy_solution((a, b)) + "\n")
            texts.append(" " + torch_answer(a) + " " + torch_answer(b))
    return texts
