"""Override or scale a task's module-level size constants (e.g. `batch_size = 4096`, `N = 2048 * 2`,
`height = width = 256`, `input_shape = (128, 4096)`).

GPU-sized tasks do not fit a CPU. The loader can set constants explicitly, scale them, or shrink them
until the task's estimated memory (inputs, weights and output, measured on torch's `meta` device, so
nothing is allocated) fits a budget: batch-like sizes first, channel/feature counts last, and a shrunk
task must still run one forward on the CPU.
"""

from __future__ import annotations

import ast
import math
import operator
import re

from kernelrl.tasks.footprint import estimate_bytes, run_once
from kernelrl.tasks.metadata import parse_module
from kernelrl.tasks.task import Task, TaskError

# Constants that are shape *parameters* rather than sizes: never scaled automatically.
NOT_SIZES = {"kernel_size", "stride", "padding", "dilation", "groups", "num_groups", "axis", "seed"}
MIN_SCALABLE = 16  # constants below this are left alone when scaling (batch-like ones excepted)
# Batch-like dimensions shrink first (down to 1); channel/feature counts only when nothing else fits.
BATCH_LIKE = re.compile(r"(^|_)(batch|batches|bs|b|n_samples|num_samples|samples)(_|$)", re.I)
CHANNEL_LIKE = re.compile(r"channel|feature|hidden|embed|(^|_)(c|ch|in_c|out_c|d_model|heads|num_heads|num_classes|"
                          r"vocab|vocab_size)(_|$)", re.I)
OVERRIDE_MARK = "# kernelrl: size override"

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.Mod: operator.mod}


def _int_value(node: ast.AST) -> int | None:
    """The value of an integer literal or an arithmetic expression of integer literals (`2048 * 2`)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _int_value(node.left), _int_value(node.right)
        if left is None or right is None or (isinstance(node.op, ast.Pow) and not 0 <= right <= 64):
            return None
        try:
            value = _BINOPS[type(node.op)](left, right)
        except (ZeroDivisionError, ValueError):
            return None
        return value if type(value) is int and abs(value) < 2**62 else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _int_value(node.operand)
        return -value if value is not None else None
    return None


def size_constants(source: str) -> dict[str, tuple[int, ast.AST]]:
    """Module-level integer sizes: name -> (value, node to rewrite).

    Recognised: `N = 4096`, expressions of literals (`N = 2048 * 2`), tuple or list sizes
    (`shape = (128, 4096)`, `widths = [4096, 4096]`, as `shape[0]`, `shape[1]`), chained
    (`height = width = 256`) and unpacking (`M, K = 1024, 4096`) assignments. The node is the value
    to replace in place, or the whole statement where an override is a new assignment after it
    (chained, unpacking). A later assignment of a name wins."""
    found: dict[str, tuple[int, ast.AST]] = {}
    for node in parse_module(source, "<task>").body:
        if not isinstance(node, ast.Assign):
            continue
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, _int_value(node.value)
            if value is not None:
                found[name] = (value, node.value)
            elif isinstance(node.value, ast.Tuple | ast.List):
                values = [_int_value(e) for e in node.value.elts]
                if values and all(v is not None for v in values):
                    for i, (v, elt) in enumerate(zip(values, node.value.elts, strict=True)):
                        found[f"{name}[{i}]"] = (v, elt)  # type: ignore[assignment]
            continue
        pairs: list[tuple[str, int]] = []
        for target in node.targets:
            if isinstance(target, ast.Name) and (v := _int_value(node.value)) is not None:
                pairs.append((target.id, v))
            elif (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                  and len(target.elts) == len(node.value.elts)):
                for t, e in zip(target.elts, node.value.elts, strict=True):
                    if isinstance(t, ast.Name) and (v := _int_value(e)) is not None:
                        pairs.append((t.id, v))
        for name, v in pairs:
            found[name] = (v, node)
    return found


def apply_overrides(source: str, overrides: dict[str, int]) -> tuple[str, dict[str, tuple[int, int]]]:
    """Rewrite the named sizes (`size_constants`); returns the new source and name -> (old, new)."""
    constants = size_constants(source)
    unknown = set(overrides) - set(constants)
    if unknown:
        raise TaskError(
            f"cannot override {sorted(unknown)}: not module-level integer sizes "
            f"(available: {', '.join(sorted(constants)) or 'none'})"
        )
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    changed: dict[str, tuple[int, int]] = {}
    inserts: dict[int, list[str]] = {}  # after line (1-based) -> new assignments
    edits: list[tuple[ast.AST, int]] = []
    for name, new in overrides.items():
        old, node = constants[name]
        new = int(new)
        if new < 1:
            raise TaskError(f"size override {name}={new} must be >= 1")
        if old == new:
            continue
        changed[name] = (old, new)
        if isinstance(node, ast.Assign) or node.lineno != node.end_lineno:
            inserts.setdefault(node.end_lineno or node.lineno, []).append(f"{name} = {new}  {OVERRIDE_MARK} (was {old})\n")
        else:
            edits.append((node, new))
    # From the bottom up, so earlier line numbers and column offsets stay valid.
    for node, new in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        row = node.lineno - 1
        line = lines[row]
        start, end = _byte_to_char(line, node.col_offset), _byte_to_char(line, node.end_col_offset or 0)
        lines[row] = line[:start] + str(new) + line[end:]
    for after in sorted(inserts, reverse=True):
        lines[after:after] = inserts[after]
    return "".join(lines), changed


def _byte_to_char(line: str, byte_offset: int) -> int:
    return len(line.encode()[:byte_offset].decode(errors="ignore"))


def _base(name: str) -> str:
    return name.split("[", 1)[0]


def size_tier(name: str) -> int:
    """Shrinking order: 0 batch-like, 1 other sizes (spatial, sequence, matrix dims), 2 channel/feature counts."""
    base = _base(name)
    return 0 if BATCH_LIKE.search(base) else 2 if CHANNEL_LIKE.search(base) else 1


def size_tiers(source: str) -> dict[str, int]:
    """`size_tier` of each size constant, where a size the model is built from (used by get_init_inputs()
    or a class, directly or through other module-level names) counts as a channel/feature count."""
    tree = parse_module(source, "<task>")
    uses: dict[str, set[str]] = {}
    roots: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            for target in node.targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name):
                        uses.setdefault(t.id, set()).update(names)
        elif isinstance(node, ast.ClassDef):
            scopes = [n for n in ast.walk(node) if isinstance(n, ast.FunctionDef)]
            roots |= set().union(*(_free_names(f) for f in scopes)) | _free_names(node, scopes)
        elif isinstance(node, ast.FunctionDef) and node.name == "get_init_inputs":
            roots |= _free_names(node)
    built_from, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in built_from:
            built_from.add(name)
            todo.extend(uses.get(name, ()))
    return {n: 2 if size_tier(n) == 1 and _base(n) in built_from else size_tier(n) for n in size_constants(source)}


def _free_names(scope: ast.AST, skip: list[ast.FunctionDef] | None = None) -> set[str]:
    """Names `scope` reads but does not bind itself (its arguments and assignments are its own)."""
    inner = {id(n) for f in skip or [] for n in ast.walk(f) if n is not f}
    nodes = [n for n in ast.walk(scope) if id(n) not in inner]
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {a.arg for a in nodes if isinstance(a, ast.arg)}
    return {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def scalable(name: str, value: int) -> bool:
    """Whether a size constant may be shrunk: not a name that is never a size, and large enough."""
    if _base(name) in NOT_SIZES:
        return False
    return value >= 3 if size_tier(name) == 0 else value >= MIN_SCALABLE  # a batch halves down to 2


def scale_sizes(source: str, factor: float) -> dict[str, int]:
    """New values for every scalable size constant multiplied by `factor` (at least 1)."""
    return {
        name: max(1, round(value * factor))
        for name, (value, _) in size_constants(source).items()
        if _base(name) not in NOT_SIZES and value >= MIN_SCALABLE
    }


def _estimate(task_id: str, source: str) -> int:
    """`estimate_bytes`, with a failure reported as this task's TaskError (the other tasks still load)."""
    try:
        return estimate_bytes(source)
    except ImportError as exc:
        raise TaskError(f"{task_id}: needs a module that is not installed: {_first_line(exc)}") from None
    except Exception as exc:
        raise TaskError(f"{task_id}: cannot estimate its memory (building it on the meta device failed): "
                        f"{_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def fit_to_budget(task: Task, max_bytes: int, max_rounds: int = 60, verify: bool = True) -> Task:
    """Halve sizes until the task's estimated memory fits `max_bytes`: batch-like sizes first (down to 2),
    then other sizes, then channel/feature counts (`size_tiers`) only if nothing else is left (noted in
    `task.notes`); in each tier the largest first. With `verify`, a shrunk task must still build and run one forward
    on the CPU (real tensors: the meta device misses shape errors of ops without meta kernels). If it
    does not, sizes that were equal are tried shrunk together (a batch that must match a feature size)."""
    overrides = _halvings(task, max_bytes, max_rounds, tied=False)
    if not overrides:
        return task
    result = _shrunk(task, overrides, max_bytes)
    if verify:
        try:
            run_once(result.source)
        except Exception as exc:
            tied = _halvings(task, max_bytes, max_rounds, tied=True)
            if tied != overrides and _runs(tied_result := _shrunk(task, tied, max_bytes)):
                return tied_result
            sizes = ", ".join(f"{k}={v[1]}" for k, v in sorted(result.size_overrides.items()))
            raise TaskError(f"{task.id}: shrunk to fit {max_bytes / 2**20:.1f} MiB ({sizes}) but no longer runs: "
                            f"{_first_line(exc)}{_cuda_hint(exc)}") from None
    return result


def _halvings(task: Task, max_bytes: int, max_rounds: int, tied: bool) -> dict[str, int]:
    """The overrides that fit `max_bytes`; `tied` halves every size that had the chosen one's value with it.
    A size whose halving frees no memory (unused, or not a memory size) is left as it is."""
    overrides: dict[str, int] = {}
    original = {n: v for n, (v, _) in size_constants(task.source).items()}
    tiers, skip = size_tiers(task.source), set()
    source = task.source
    size = _estimate(task.id, source)
    for _ in range(max_rounds):
        if size <= max_bytes:
            return overrides
        constants = {n: v for n, (v, _) in size_constants(source).items() if scalable(n, v) and n not in skip}
        if not constants:
            raise TaskError(f"{task.id}: does not fit {max_bytes / 2**20:.1f} MiB: still {size / 2**20:.1f} MiB with "
                            "every size constant shrunk (sizes written as literals in the model or get_inputs() "
                            "cannot be shrunk)")
        tier = min(tiers.get(n, 1) for n in constants)
        name = max((n for n in constants if tiers.get(n, 1) == tier), key=lambda n: constants[n])
        group = [n for n in constants if original.get(n) == original.get(name) and constants[n] == constants[name]]
        trial = dict(overrides) | {n: max(1, math.ceil(constants[n] / 2)) for n in (group if tied else [name])}
        trial_source, _ = apply_overrides(task.source, trial)
        trial_size = _estimate(task.id, trial_source)
        if trial_size >= size:
            skip.update(group if tied else [name])
            continue
        overrides, source, size = trial, trial_source, trial_size
    raise TaskError(f"{task.id}: could not fit {max_bytes} bytes within {max_rounds} halvings")


def _shrunk(task: Task, overrides: dict[str, int], max_bytes: int) -> Task:
    result = with_overrides(task, overrides)
    tiers = size_tiers(task.source)
    shrunk_channels = sorted(n for n in overrides if tiers.get(n) == 2)
    if shrunk_channels:
        changes = ", ".join(f"{n} {result.size_overrides[n][0]}->{result.size_overrides[n][1]}" for n in shrunk_channels)
        note = f"channel/feature sizes shrunk to fit {max_bytes / 2**20:.1f} MiB: {changes}"
        result.notes = f"{result.notes}\n{note}".strip()
    return result


def _runs(task: Task) -> bool:
    try:
        run_once(task.source)
    except Exception:
        return False
    return True


def _cuda_hint(exc: BaseException) -> str:
    if "CUDA" in str(exc):
        return " (the task puts tensors on a CUDA device, e.g. device='cuda' in get_inputs(); this torch has none)"
    return ""


def with_overrides(task: Task, overrides: dict[str, int]) -> Task:
    """A copy of `task` with constants overridden; `size_overrides` keeps the original values."""
    source, changed = apply_overrides(task.source, overrides)
    merged = dict(task.size_overrides)
    for name, (old, new) in changed.items():
        merged[name] = (merged[name][0] if name in merged else old, new)
    data = task.to_dict() | {"source": source}
    result = Task.from_dict(data)
    result.size_overrides = merged
    return result
