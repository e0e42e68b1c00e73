"""A tiny model's NKI task family: elementwise chains and row reductions written as NKI kernels.

The NKI counterpart of `kernelrl.train.elementwise_chains` (the tiny-cpu job's C family), for NKI-Agent's
findings with a policy that learns. A task is a chain of cheap elementwise ops, optionally ended by a row
reduction, e.g. ``mul 2.0 | relu | rowsum``; its reference is a KernelBench-format `Model` (one eager PyTorch
op per link). The answer is the body of the kernel's loop over 128-partition row tiles, NKI statements
separated by ``;``: a load of the tile from HBM, one statement per op on the SBUF tile ``t``, a store::

    t = nl.load(x[r, f]); t = nl.relu(t); t = nl.sum(t, axis=1, keepdims=True); nl.store(y[r, o], value=t)

`candidate_source` wraps it into a full ``@nki.jit`` kernel and ``ModelNew`` (``r``: the tile's partition
indices, ``f``: all columns, ``o``: the single output column of a reduction), judged by the gym's real
``nki`` backend. `solution` generates correct answers (SFT data for any chain); `corrupt` writes the typical
first-draft mistakes (a missing store, compute on the HBM tensor, a dropped or wrong op, the wrong output
columns, a reduction without ``keepdims``), whose real gym verdicts make the feedback-then-fix SFT turns.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass

from kernelrl.tasks.loaders import task_from_source
from kernelrl.tasks.task import Task

CONSTS = ("0.5", "2.0", "3.0")
PMAX = 128


@dataclass(frozen=True)
class Op:
    """One link: its prompt word, the eager PyTorch statement on ``x`` and the NKI statement on the tile ``t``."""

    word: str
    torch_stmt: str
    nki_stmt: str
    reduction: bool = False


def _ops() -> dict[str, Op]:
    ops = {w: Op(w, t, f"t = nl.{n}(t)") for w, t, n in (
        ("relu", "x = torch.relu(x)", "relu"), ("abs", "x = torch.abs(x)", "abs"),
        ("neg", "x = torch.neg(x)", "negative"), ("square", "x = x * x", "square"),
        ("tanh", "x = torch.tanh(x)", "tanh"), ("sigmoid", "x = torch.sigmoid(x)", "sigmoid"))}
    for c in CONSTS:
        ops[f"add {c}"] = Op(f"add {c}", f"x = x + {c}", f"t = nl.add(t, {c})")
        ops[f"mul {c}"] = Op(f"mul {c}", f"x = x * {c}", f"t = nl.multiply(t, {c})")
        ops[f"sub {c}"] = Op(f"sub {c}", f"x = x - {c}", f"t = nl.subtract(t, {c})")
    return ops


OPS: dict[str, Op] = _ops()
REDUCTIONS: dict[str, Op] = {
    "rowsum": Op("rowsum", "x = x.sum(dim=1, keepdim=True)", "t = nl.sum(t, axis=1, keepdims=True)", True),
    "rowmax": Op("rowmax", "x = x.amax(dim=1, keepdim=True)", "t = nl.max(t, axis=1, keepdims=True)", True),
}
ALL_OPS: dict[str, Op] = {**OPS, **REDUCTIONS}
LOAD = "t = nl.load(x[r, f])"

REFERENCE = '''"""NKI chain: {chain}."""

import torch
import torch.nn as nn

TASK_META = {{"id": "{task_id}", "level": 1, "tags": ["elementwise", "reduction", "tiny-nki-family"]}}

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

CANDIDATE = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch
import torch.nn as nn


@nki.jit
def chain_kernel(x):
    y = nl.ndarray(({rows}, {out_cols}), dtype=x.dtype, buffer=nl.shared_hbm)
    p = nl.arange({pmax})[:, None]
    f = nl.arange({cols})[None, :]
    o = nl.arange(1)[None, :]
    for i in nl.affine_range({tiles}):
        r = i * {pmax} + p
{body}
    return y


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return chain_kernel(x)
'''


def reduces(chain: tuple[str, ...]) -> bool:
    """Whether the chain ends in a row reduction (a [rows, 1] output)."""
    return bool(chain) and ALL_OPS[chain[-1]].reduction


def chain_id(chain: tuple[str, ...]) -> str:
    return "tiny-nki/" + "_".join(w.replace(" ", "").replace(".", "p") for w in chain)


def prompt_text(chain: tuple[str, ...]) -> str:
    """What the tiny model reads: the op chain and a cue for the kernel body."""
    return "nki ops: " + " | ".join(chain) + "\nkernel:"


def store_stmt(chain: tuple[str, ...]) -> str:
    return f"nl.store(y[r, {'o' if reduces(chain) else 'f'}], value=t)"


def statements(chain: tuple[str, ...]) -> list[str]:
    """The correct answer's statements: load, one per op, store."""
    return [LOAD, *(ALL_OPS[w].nki_stmt for w in chain), store_stmt(chain)]


def join(stmts: list[str]) -> str:
    return " " + "; ".join(stmts)


def solution(chain: tuple[str, ...]) -> str:
    """The correct answer (one form per op: a tiny model learns one spelling faster)."""
    return join(statements(chain))


def reference_source(chain: tuple[str, ...], rows: int, cols: int) -> str:
    body = "\n".join("        " + ALL_OPS[w].torch_stmt for w in chain)
    return REFERENCE.format(chain=" | ".join(chain), task_id=chain_id(chain), rows=rows, cols=cols, body=body)


def make_task(chain: tuple[str, ...], rows: int = 256, cols: int = 64) -> Task:
    """The gym `Task` of a chain (KernelBench format, fp32 tolerances); `rows` a multiple of 128."""
    if rows % PMAX:
        raise ValueError(f"rows must be a multiple of {PMAX}, got {rows}")
    return task_from_source(reference_source(chain, rows, cols), chain_id(chain), f"<tiny nki family {chain_id(chain)}>",
                            level=1)


def answer_statements(answer: str) -> list[str]:
    """The statements of an answer up to its end marker: split at ``;`` and newlines, whitespace collapsed."""
    body = answer.split("</s>")[0]
    return [" ".join(p.split()) for p in re.split(r"[;\n]", body) if p.strip()]


def candidate_source(chain: tuple[str, ...], answer: str, rows: int, cols: int) -> str | None:
    """The full candidate for an answer (None when it has no statement): the statements as the tile loop's body."""
    stmts = answer_statements(answer)
    if not stmts:
        return None
    body = "\n".join("        " + s for s in stmts)
    return CANDIDATE.format(rows=rows, cols=cols, out_cols=1 if reduces(chain) else cols, pmax=PMAX,
                            tiles=rows // PMAX, body=body)


#: first-draft mistakes `corrupt` writes, each a real NKI error class or a wrong kernel
MISTAKES = ("no_store", "hbm_compute", "drop_op", "wrong_op", "store_cols", "no_keepdims")


def applicable(chain: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(m for m in MISTAKES if m != "no_keepdims" or reduces(chain))


def corrupt(chain: tuple[str, ...], kind: str, rng: random.Random) -> str:
    """The correct answer with one mistake of `kind` (`MISTAKES`)."""
    stmts = statements(chain)
    ops = list(range(1, len(stmts) - 1))
    if kind == "no_store":
        stmts = stmts[:-1]
    elif kind == "hbm_compute":  # the load dropped: the first op reads the HBM tensor
        stmts = [stmts[1].replace("(t", "(x[r, f]", 1), *stmts[2:]]
    elif kind == "drop_op":
        del stmts[rng.choice(ops)]
    elif kind == "wrong_op":
        k = rng.choice(ops)
        pool = REDUCTIONS if ALL_OPS[chain[k - 1]].reduction else OPS
        stmts[k] = pool[rng.choice(sorted(w for w in pool if w != chain[k - 1]))].nki_stmt
    elif kind == "store_cols":
        stmts[-1] = f"nl.store(y[r, {'f' if reduces(chain) else 'o'}], value=t)"
    elif kind == "no_keepdims":
        stmts[-2] = stmts[-2].replace(", keepdims=True", "")
    else:
        raise ValueError(f"unknown mistake {kind!r}; one of {', '.join(MISTAKES)}")
    return join(stmts)


def split_chains(*, seed: int, min_len: int = 1, max_len: int = 3, n_train: int = 256, n_heldout: int = 32,
                 reduce_fraction: float = 0.4) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """Disjoint train and held-out chains (held-out: compositions never seen in training), deterministic in
    `seed`: `min_len`..`max_len` elementwise ops, no op twice in a row, a `reduce_fraction` of them ended by a
    row reduction."""
    rng = random.Random(seed)
    words, reds = sorted(OPS), sorted(REDUCTIONS)
    seen: set[tuple[str, ...]] = set()
    out: list[tuple[str, ...]] = []
    if n_train + n_heldout > 4 * len(words) ** max_len:
        raise ValueError("too few distinct chains for the requested split")
    while len(out) < n_train + n_heldout:
        chain = [rng.choice(words)]
        for _ in range(rng.randint(min_len, max_len) - 1):
            chain.append(rng.choice([w for w in words if w != chain[-1]]))
        if rng.random() < reduce_fraction:
            chain.append(rng.choice(reds))
        key = tuple(chain)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out[n_heldout:], out[:n_heldout]


def tokenizer_corpus() -> list[str]:
    """Texts the tiny tokenizer is trained on: every op word and NKI statement in prompt/answer context."""
    texts = []
    for a, b in itertools.product(sorted(OPS), sorted(REDUCTIONS)):
        texts.append(prompt_text((a, b)) + solution((a, b)) + "\n")
        texts.append(prompt_text((a,)) + solution((a,)) + "\n")
    for a, b in itertools.product(sorted(OPS), repeat=2):
        texts.append(prompt_text((a, b)) + solution((a, b)) + "\n")
    return texts
