"""Duplicate detection: a canonical source hash, an op-sequence signature and token-shingle Jaccard.

The signature is read from any KernelBench-format source (ours or a benchmark's): the ops the forward
pass calls, in order, with module attributes resolved to their `nn` class (`self.fc` -> `linear`) and
aliases folded (`F.relu`, `torch.relu`, `nn.ReLU` -> `relu`). Two tasks with the same signature differ
only in sizes or constants, which is a near-duplicate for training purposes.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelrl.tasks.metadata import META_NAME

TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?|[^\s\w]")
SHINGLE = 5
ALIASES = {"matmul": "matmul", "mm": "matmul", "bmm": "matmul", "conv2d": "conv2d", "batchnorm2d": "batch_norm",
           "batchnorm1d": "batch_norm", "layernorm": "layer_norm", "groupnorm": "group_norm", "amax": "max",
           "instancenorm2d": "instance_norm", "maxpool2d": "max_pool2d", "avgpool2d": "avg_pool2d"}
IGNORED_CALLS = {"view", "reshape", "contiguous", "transpose", "permute", "size", "flatten", "unsqueeze", "squeeze",
                 "super", "range", "len", "float", "int", "chunk", "split", "new_zeros", "expand", "t"}


def _strip(tree: ast.Module) -> ast.Module:
    """Drop TASK_META and docstrings (in place)."""
    tree.body = [
        n for n in tree.body
        if not (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == META_NAME for t in n.targets))
    ]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return tree


def canonical_source(source: str) -> str:
    """Source without metadata, docstrings, comments or formatting differences."""
    return ast.unparse(_strip(ast.parse(source)))


def canonical_hash(source: str) -> str:
    return hashlib.sha256(canonical_source(source).encode()).hexdigest()[:20]


def shingles(source: str, size: int = SHINGLE) -> set[int]:
    """Hashed token n-grams of the canonical source (numbers folded, so sizes do not matter)."""
    tokens = ["0" if t[0].isdigit() else t for t in TOKEN.findall(canonical_source(source))]
    return {hash(tuple(tokens[i : i + size])) for i in range(max(1, len(tokens) - size + 1))}


def jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _norm(name: str) -> str:
    name = name.lower()
    return ALIASES.get(name, name)


def op_signature(source: str) -> tuple[str, ...]:
    """The ops `Model.forward` calls, in order (see the module docstring)."""
    tree = ast.parse(source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return ()
    modules: dict[str, str] = {}
    for node in ast.walk(model):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                    func = node.value.func
                    modules[target.attr] = _norm(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "?"))
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        return ()
    calls: list[tuple[int, int, str]] = []
    for node in ast.walk(forward):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                name = modules.get(func.attr, func.attr)
            elif isinstance(func, ast.Attribute):
                name = _norm(func.attr)
            elif isinstance(func, ast.Name):
                name = _norm(func.id)
            else:
                continue
            if name not in IGNORED_CALLS:
                # Inner calls run first: order by end position.
                calls.append((node.end_lineno or 0, node.end_col_offset or 0, name))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            calls.append((node.end_lineno or 0, node.end_col_offset or 0, "matmul"))
    return tuple(name for *_, name in sorted(calls))


@dataclass
class DedupIndex:
    """Seen tasks: exact hashes, op signatures, and shingle sets for near-duplicate search."""

    threshold: float = 0.9
    hashes: dict[str, str] = field(default_factory=dict)
    signatures: dict[tuple[str, ...], str] = field(default_factory=dict)
    shingle_sets: list[tuple[str, set[int]]] = field(default_factory=list)

    def check(self, source: str) -> tuple[str, str] | None:
        """(reason, id of the task it duplicates) or None; reason is `duplicate` or `near-duplicate`."""
        digest = canonical_hash(source)
        if digest in self.hashes:
            return "duplicate", self.hashes[digest]
        signature = op_signature(source)
        if signature and signature in self.signatures:
            return "near-duplicate", self.signatures[signature]
        mine = shingles(source)
        for other_id, other in self.shingle_sets:
            if jaccard(mine, other) >= self.threshold:
                return "near-duplicate", other_id
        return None

    def add(self, source: str, task_id: str) -> None:
        self.hashes[canonical_hash(source)] = task_id
        signature = op_signature(source)
        if signature:
            self.signatures.setdefault(signature, task_id)
        self.shingle_sets.append((task_id, shingles(source)))

    @classmethod
    def from_directory(cls, directory: str | Path, threshold: float = 0.9) -> DedupIndex:
        """Index every `*.py` task under `directory` (recursively), e.g. a benchmark to keep out of training."""
        index = cls(threshold=threshold)
        for path in sorted(Path(directory).rglob("*.py")):
            try:
                index.add(path.read_text(), str(path))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
        return index
