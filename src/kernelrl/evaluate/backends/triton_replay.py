"""Proof of work for the triton backend: the trusted side re-runs the candidate's kernel launches.

Without a GPU every Triton kernel runs under the interpreter, in the candidate's process, so nothing that
process reports (a launch counter, the torch ops it saw) proves that a kernel made the outputs: a grid
callable can compute the answer with torch inside the launch, forward can compute it with NumPy and
launch nothing. The proof instead rests on a replay outside it:

1. The candidate process records each launch of a forward (`LaunchLog`): the kernel's name, the grid
   as the ints it evaluated to (a callable is called there, once, and only its result is kept), and
   every argument: scalars as values, tensors as (storage address, storage bytes, offset, shape,
   strides, dtype). The record is the candidate's claim; a lie only makes the replay disagree.
2. The judge extracts the `@triton.jit` functions from the candidate's source (`kernel_module`): only
   they, their triton imports and module constants, with bodies refused where they hold anything a
   Triton compiler would not compile (imports, dunder or private attributes, names that are neither
   parameters, locals, kernels, constants nor triton's) - host compute cannot hide inside a kernel.
3. A confined fork of the judge that runs no candidate module code (`evaluate.proof.ReplayServer` calls
   `replay`) runs exactly the recorded launches, in order, on buffers of its own: the judge's trusted
   inputs and weights where a storage holds them and zeros everywhere else, then hands back the storages
   of the returned outputs; the judge compares those with the reference. An answer that no recorded launch
   of the candidate's kernels stored - made by a grid callable, NumPy, torch or a lie - is not in the
   replay: `[kernel-proof]`.

The replay proves what the verdict rewards without a GPU (a correct kernel: no time is measured
there). It is not run on a GPU (see DESIGN.md, "Round three: proof of work").
"""

from __future__ import annotations

import ast
import functools
import types
from typing import Any, ClassVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelrl.evaluate.backends.base import decorated_jit

SAFE_BUILTINS = frozenset({"range", "min", "max", "int", "float", "bool", "abs", "len"})
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "warmup", "grid"})
# Attributes a kernel may read off its values (tl.tensor's methods and properties); nothing that reaches
# the interpreter's host arrays (`.handle`, `.data`) or Python internals.
VALUE_ATTRIBUTES = frozenset({"to", "dtype", "shape", "T", "reshape", "trans", "permute", "view", "broadcast_to",
                              "expand_dims", "ravel", "split", "value", "element_ty", "numel", "type", "sum", "max",
                              "min", "argmax", "argmin", "cumsum", "cumprod", "sort", "flip", "abs", "exp", "exp2",
                              "log", "log2", "sqrt", "rsqrt", "sigmoid", "softmax", "cos", "sin", "floor", "ceil",
                              "xor_sum", "reduce", "associative_scan", "histogram", "is_floating", "is_int",
                              "is_ptr", "primitive_bitwidth", "scalar"})
TRITON_FUNCTIONS = frozenset({"triton.cdiv", "triton.next_power_of_2", "triton.jit"})
MAX_LAUNCHES = 4096  # per forward: more is refused rather than recorded


# -- candidate side ----------------------------------------------------------------------------------

def describe_argument(value: Any) -> dict[str, Any]:
    """A launch argument as the replay needs it."""
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        return {"tensor": {"storage": storage.data_ptr(), "nbytes": storage.nbytes(), "offset": value.storage_offset(),
                           "shape": list(value.shape), "stride": list(value.stride()), "dtype": str(value.dtype)}}
    if value is None or isinstance(value, bool | int | float | str):
        return {"value": value}
    if hasattr(value, "value") and type(value).__name__ == "constexpr":
        return {"value": value.value}
    return {"unsupported": type(value).__name__}


class LaunchLog:
    """Records every Triton launch (kernel, grid as ints, described arguments) made in this process."""

    launches: ClassVar[list[dict[str, Any]]] = []
    recording: ClassVar[bool] = True  # off: launches pass straight through (no cost on timed calls)
    inside: ClassVar[int] = 0  # > 0 while a recorded launch runs
    _installed: ClassVar[bool] = False

    @classmethod
    def install(cls) -> None:
        if cls._installed:
            return
        from kernelrl.evaluate.guards import triton_launch_classes

        for klass in triton_launch_classes():
            klass.run = cls._recording(klass.run)
        cls._installed = True

    @classmethod
    def _recording(cls, original: Any) -> Any:
        @functools.wraps(original)
        def run(self: Any, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
            if warmup or not cls.recording:
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
            names = list(getattr(self, "arg_names", None) or getattr(getattr(self, "fn", None), "arg_names", []))
            bound = {**dict(zip(names, args, strict=False)), **kwargs}
            evaluated = grid(bound) if callable(grid) else grid
            dims = [int(d) for d in (evaluated if isinstance(evaluated, list | tuple) else (evaluated,))]
            if len(cls.launches) < MAX_LAUNCHES:
                cls.launches.append({"kernel": getattr(getattr(self, "fn", None), "__name__", "?"), "grid": dims,
                                     "args": {k: describe_argument(v) for k, v in bound.items() if k not in LAUNCH_OPTIONS}})
            cls.inside += 1  # the interpreter's own torch ops are no data movement of the forward's
            try:
                return original(self, *args, grid=tuple(dims), warmup=warmup, **kwargs)
            finally:
                cls.inside -= 1

        return run

    @classmethod
    def take(cls) -> list[dict[str, Any]]:
        """The launches since the last take (one forward's)."""
        launches, cls.launches = list(cls.launches), []
        return launches


_COPIES = {"clone": 0, "_to_copy": 0, "copy_": 1}  # aten op -> position of its source tensor
_FILLS = {"full": 1, "full_like": 1, "new_full": 2, "fill_": 1}  # aten op -> position of its fill value
_CONSTANT_FILLS = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "zero_": 0, "ones": 1, "ones_like": 1, "new_ones": 1}
_IN_PLACE = {"copy_", "fill_", "zero_"}


class DataLog(TorchDispatchMode):
    """While active (one recorded forward), the torch ops that move data without arithmetic - copies,
    dtype conversions, fills - go into `LaunchLog.launches` in order with the launches, as
    `{"data": "copy", "out", "src"}` or `{"data": "fill", "out", "value"}`, so the replay redoes them
    (`weight.t().contiguous()`, `x.float()`, `torch.full(..., -inf)` before an atomic max)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if LaunchLog.inside or len(LaunchLog.launches) >= MAX_LAUNCHES:
            return result
        out = args[0] if name in _IN_PLACE else result
        entry: dict[str, Any] | None = None
        if name in _COPIES and len(args) > _COPIES[name] and isinstance(args[_COPIES[name]], torch.Tensor):
            entry = {"data": "copy", "src": describe_argument(args[_COPIES[name]])}
        elif name in _FILLS and len(args) > _FILLS[name] and isinstance(args[_FILLS[name]], bool | int | float):
            entry = {"data": "fill", "value": args[_FILLS[name]]}
        elif name in _CONSTANT_FILLS:
            entry = {"data": "fill", "value": _CONSTANT_FILLS[name]}
        if entry is not None and isinstance(out, torch.Tensor):
            entry["out"] = describe_argument(out)
            if all(str(entry[k]["tensor"]["dtype"]) in _DTYPES for k in ("out", "src") if k in entry):
                LaunchLog.launches.append(entry)
        return result


# -- judge side: which code may be replayed ----------------------------------------------------------

class KernelRefused(ValueError):
    """The candidate's kernels hold something a replay must not run."""


def _is_constant(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | bool):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _is_constant(node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "constexpr":
        return len(node.args) == 1 and not node.keywords and _is_constant(node.args[0])
    return False


def kernel_module(source: str) -> tuple[str, list[str]]:
    """The replayable module text of the candidate's source - its triton imports, numeric module
    constants and `@triton.jit` functions (without decorator arguments) - and the kernels' names.
    Raises `KernelRefused` naming the first construct no replay runs."""
    tree = ast.parse(source)
    imports, constants, kernels = [], [], []
    for node in tree.body:
        if (isinstance(node, ast.Import) and all(a.name == "triton" or a.name.startswith("triton.") for a in node.names)) or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton" and not node.level):
            imports.append(node)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and _is_constant(node.value)):
            constants.append(node)
        elif isinstance(node, ast.FunctionDef) and decorated_jit(node):
            kernels.append(node)
    aliases = {"triton": "triton", "tl": "triton.language"}
    imports = [kept for node in imports if (kept := _triton_imports(node, aliases)) is not None]
    allowed = SAFE_BUILTINS | set(aliases) | {c.targets[0].id for c in constants} | {k.name for k in kernels}  # type: ignore[attr-defined]
    for kernel in kernels:
        kernel.decorator_list = []
        _check_body(kernel, allowed, aliases)
        kernel.decorator_list = [ast.parse("triton.jit", mode="eval").body]
    header = [ast.parse("import triton\nimport triton.language as tl").body]
    module = ast.Module(body=[*header[0], *imports, *constants, *kernels], type_ignores=[])
    return ast.unparse(ast.fix_missing_locations(module)), [k.name for k in kernels]


def _triton_imports(node: ast.Import | ast.ImportFrom, aliases: dict[str, str]) -> ast.stmt | None:
    """`node` with only the names that are triton, triton.language or of it (recorded in `aliases`); a
    name bound to anything else (`from triton.language.core import builtins`) is left out of the replay."""
    kept = []
    for alias in node.names:
        if isinstance(node, ast.ImportFrom):
            name, path = alias.asname or alias.name, f"{node.module}.{alias.name}"
        else:
            name = alias.asname or alias.name.split(".")[0]
            path = alias.name if alias.asname else name
        if path in ("triton", "triton.language") or path in TRITON_FUNCTIONS or (
                path.startswith("triton.language.") and _triton_language(path)):
            aliases[name] = path
            kept.append(alias)
    if not kept:
        return None
    return ast.ImportFrom(module=node.module, names=kept, level=0) if isinstance(node, ast.ImportFrom) else ast.Import(names=kept)


_REFUSED_NODES = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Lambda, ast.ClassDef, ast.FunctionDef,
                  ast.AsyncFunctionDef, ast.With, ast.AsyncWith, ast.Try, ast.Yield, ast.YieldFrom, ast.Await,
                  ast.Delete, ast.Starred, ast.NamedExpr, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None when the chain does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


@functools.lru_cache(maxsize=4096)
def _triton_language(path: str) -> bool:
    """Whether `path` (triton.language.a.b...) resolves, in this process's triton, through modules of
    triton.language only, to a value of triton's own: not to `tl.core.builtins`, `tl.core.math` or
    anything else those modules happen to import."""
    import importlib

    try:
        value: Any = importlib.import_module("triton.language")
    except ImportError:
        return False
    for name in path.split(".")[2:]:
        if not _of_triton_language(value):
            return False
        value = getattr(value, name, None) or _submodule(f"{value.__name__}.{name}")
        if value is None:
            return False
    if isinstance(value, types.ModuleType):
        return _of_triton_language(value)
    if isinstance(value, bool | int | float | str):
        return True
    owner = value if isinstance(value, type) or callable(value) else type(value)
    return str(getattr(owner, "__module__", "") or "").startswith("triton.")


def _submodule(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _of_triton_language(value: Any) -> bool:
    return isinstance(value, types.ModuleType) and (value.__name__ == "triton.language"
                                                    or value.__name__.startswith("triton.language."))


def _check_body(kernel: ast.FunctionDef, allowed: set[str], aliases: dict[str, str]) -> None:
    """Refuse anything in `kernel` (signature and body) that a Triton compiler would not compile."""
    args = kernel.args
    local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    local |= {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if args.vararg or args.kwarg:
        raise KernelRefused(f"kernel {kernel.name}: *args/**kwargs parameters")
    for node in ast.walk(kernel):
        if node is kernel:
            continue
        where = f"kernel {kernel.name} line {getattr(node, 'lineno', kernel.lineno)}"
        if isinstance(node, _REFUSED_NODES):
            raise KernelRefused(f"{where}: {type(node).__name__} is not Triton kernel code")
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                raise KernelRefused(f"{where}: attribute {node.attr!r}")
            chain = _dotted(node)
            if chain and chain[0] in aliases and chain[0] not in local:
                path = ".".join([aliases[chain[0]], *chain[1:]])
                if not (path in TRITON_FUNCTIONS or (path.startswith("triton.language.") and _triton_language(path))):
                    raise KernelRefused(f"{where}: {path} is not part of triton.language")
            elif node.attr not in VALUE_ATTRIBUTES and not (chain and len(chain) == 2 and chain[0] in aliases):
                raise KernelRefused(f"{where}: attribute {node.attr!r} of a value")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local | allowed:
            raise KernelRefused(f"{where}: {node.id!r} is neither a parameter, a local, a kernel, a module "
                                "constant nor triton")


# -- the replay (a clean, confined process) ----------------------------------------------------------

_DTYPES = {str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16,
                               torch.int32, torch.int64, torch.uint8, torch.bool)}


def _view(buffers: dict[int, torch.Tensor], spec: dict[str, Any]) -> torch.Tensor:
    dtype = _DTYPES.get(str(spec["dtype"]))
    if dtype is None:
        raise KernelRefused(f"tensor dtype {spec['dtype']} cannot be replayed")
    storage = int(spec["storage"])
    nbytes = int(spec["nbytes"])
    buffer = buffers.get(storage)
    if buffer is None or buffer.numel() < nbytes:
        grown = torch.zeros(max(nbytes, 1), dtype=torch.uint8)
        if buffer is not None:
            grown[: buffer.numel()] = buffer
        buffers[storage] = buffer = grown
    size = dtype.itemsize if hasattr(dtype, "itemsize") else torch.empty(0, dtype=dtype).element_size()
    usable = buffer[: buffer.numel() // size * size].view(dtype)
    return usable.as_strided([int(s) for s in spec["shape"]], [int(s) for s in spec["stride"]], int(spec["offset"]))


def _move(buffers: dict[int, torch.Tensor], entry: dict[str, Any]) -> None:
    """Redo one recorded data movement (`DataLog`) on the replay's buffers."""
    out = _view(buffers, entry["out"]["tensor"])
    if entry["data"] == "copy":
        out.copy_(_view(buffers, entry["src"]["tensor"]))
    elif entry["data"] == "fill":
        out.fill_(entry["value"])
    else:
        raise KernelRefused(f"unknown data movement {entry['data']!r}")


def replay(module_text: str, launches: list[dict[str, Any]], inputs: dict[int, torch.Tensor],
           outputs: list[dict[str, Any]]) -> list[torch.Tensor]:
    """Run `launches` of the kernels in `module_text` (from `kernel_module`) on buffers of this process:
    `inputs` (storage address -> the trusted bytes) and zeros for every other storage; returns copies of
    the described `outputs`. Raises `KernelRefused` for a launch that names no kernel or cannot be made."""
    namespace: dict[str, Any] = {"__name__": "kernelrl_replay"}
    exec(compile(module_text, "<kernels>", "exec"), namespace)
    buffers = {int(k): v.reshape(-1).view(torch.uint8).clone() for k, v in inputs.items()}
    for launch in launches[:MAX_LAUNCHES]:
        if "data" in launch:
            _move(buffers, launch)
            continue
        kernel = namespace.get(str(launch.get("kernel")))
        if kernel is None or type(kernel).__name__ not in ("JITFunction", "InterpretedFunction"):
            raise KernelRefused(f"a launch names {launch.get('kernel')!r}, which is no @triton.jit function of the source")
        grid = tuple(int(d) for d in launch["grid"])
        if not 1 <= len(grid) <= 3 or any(d < 0 for d in grid):
            raise KernelRefused(f"grid {grid} is not one to three non-negative ints")
        args = {}
        for name, arg in launch["args"].items():
            if "tensor" in arg:
                args[name] = _view(buffers, arg["tensor"])
            elif "value" in arg:
                args[name] = arg["value"]
            else:
                raise KernelRefused(f"argument {name} of {launch['kernel']} is a {arg.get('unsupported')}, not a tensor or number")
        kernel[grid](**args)
    return [_view(buffers, spec).clone() for spec in outputs]


_WARM_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def warm_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.sum(tl.load(x_ptr + offsets, mask=mask), axis=0) + offsets * 0.0, mask=mask)
"""


def warm_interpreter() -> None:
    """One tiny replay under the Triton interpreter (trusted code), so that forked evaluations (the
    candidate process, the judge's replay child) inherit its one-time setup instead of paying ~0.15 s each."""
    x, y = torch.ones(8), torch.empty(8)
    spec = {k: describe_argument(v) for k, v in (("x_ptr", x), ("y_ptr", y))}
    launch = {"kernel": "warm_kernel", "grid": [1], "args": {**spec, "n": {"value": 8}, "BLOCK": {"value": 8}}}
    replay(_WARM_KERNEL, [launch], {x.untyped_storage().data_ptr(): x}, [spec["y_ptr"]["tensor"]])
