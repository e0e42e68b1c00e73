"""The package layers DESIGN.md states ("## Layers") hold in the code: no subpackage of `kernelrl` imports
one above it, and the subpackages' import graph has no cycle.

The graph comes from parsing every module of `src/kernelrl` with `ast`: imports at any depth (inside
functions too, where the heavy ones live), relative imports resolved. Modules are the ``.py`` files reached
through ``__init__.py`` packages; task suites, reference solutions and red-team cases are data (candidate
code), not package modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "src" / "kernelrl"
CORE = "kernelrl"  # the top-level modules (`config_system`, `registry`, `backend_names`, `__init__`)

# DESIGN.md "## Layers", bottom to top: a package may import only packages of a lower layer (and
# CORE, the lowest); packages of one layer do not import each other. Keep the two in step.
LAYERS: tuple[tuple[str, ...], ...] = (
    (CORE,),
    ("native", "nki", "rl", "generation"),
    ("tasks",),
    ("evaluate",),
    ("rewards",),
    ("agent",),
    ("train", "bench", "serve", "proxy"),
    ("integrations",),
    ("repro",),
    ("cli",),
)

# Imports that break the order, each with its reason: (importing package, imported package).
# Empty: there are none. An entry here is debt, to be listed in the reply that adds it.
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to an absolute module name."""

    module: str  # the importing module, e.g. kernelrl.train.job
    target: str  # kernelrl.rl.advantages, or kernelrl.rl.advantages.NAME for `from ... import NAME`
    line: int


def module_files(root: Path) -> Iterator[Path]:
    """Every ``.py`` file under `root` whose directories are all packages (have ``__init__.py``)."""
    for path in sorted(root.rglob("*.py")):
        dirs = path.relative_to(root).parents
        if all((root / d / "__init__.py").is_file() for d in dirs):
            yield path


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    """(dotted module name, whether it is a package's ``__init__``)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imports_of(root: Path, path: Path) -> Iterator[Import]:
    """All imports in one module, at any depth, with ``from .x import y`` made absolute."""
    module, is_package = module_name(root, path)
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                anchor = here[: len(here) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                yield Import(module, f"{base}.{alias.name}", node.lineno)


def layer_package(root: Path, dotted: str) -> str | None:
    """The top-level subpackage a `kernelrl...` name belongs to (CORE for top-level modules and the
    package's own attributes), or None outside kernelrl."""
    parts = dotted.split(".")
    if parts[0] != root.name:
        return None
    if len(parts) > 1 and (root / parts[1] / "__init__.py").is_file():
        return parts[1]
    return CORE


def package_edges(root: Path) -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> the ``module:line`` places that import across."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in module_files(root):
        for imp in imports_of(root, path):
            src, dst = layer_package(root, imp.module), layer_package(root, imp.target)
            if dst is None or src is None or src == dst:
                continue
            places = edges.setdefault((src, dst), [])
            if f"{imp.module}:{imp.line}" not in places:  # `from m import a, b` is one place
                places.append(f"{imp.module}:{imp.line}")
    return edges


def layer_rank() -> dict[str, int]:
    return {pkg: rank for rank, layer in enumerate(LAYERS) for pkg in layer}


def upward_imports(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Edges that import the same or a higher layer and are not allowlisted, as readable lines."""
    rank = layer_rank()
    return [f"{src} -> {dst} ({', '.join(places)})" for (src, dst), places in sorted(edges.items())
            if rank[dst] >= rank[src] and (src, dst) not in ALLOWED_UPWARD]


def find_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    """One cycle of the directed graph `edges` as a path [a, b, ..., a], or None."""
    succ: dict[str, list[str]] = {}
    for src, dst in sorted(edges):
        succ.setdefault(src, []).append(dst)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in succ.get(node, []):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(succ):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


@pytest.fixture(scope="module")
def edges() -> dict[tuple[str, str], list[str]]:
    return package_edges(PACKAGE_ROOT)


def test_the_graph_is_read_from_the_real_tree(edges: dict[tuple[str, str], list[str]]) -> None:
    assert sum(1 for _ in module_files(PACKAGE_ROOT)) > 200
    assert not any("redteam_corpus" in str(p) or "/data/" in str(p) for p in module_files(PACKAGE_ROOT))
    # imports the parser must see: top level, inside a function, and `from kernelrl import MODULE`
    assert ("train", "rl") in edges and ("cli", "repro") in edges and ("evaluate", CORE) in edges


def test_every_package_has_a_layer() -> None:
    packages = {p.parent.name for p in PACKAGE_ROOT.glob("*/__init__.py")} | {CORE}
    named = [pkg for layer in LAYERS for pkg in layer]
    assert len(named) == len(set(named)), "a package is in two layers"
    assert set(named) == packages, "LAYERS and the packages on disk differ: place the new one in DESIGN.md and here"


def test_no_package_imports_its_own_layer_or_above(edges: dict[tuple[str, str], list[str]]) -> None:
    assert upward_imports(edges) == []
    assert set(edges) >= ALLOWED_UPWARD, "an allowlisted upward import is gone: drop it from ALLOWED_UPWARD"


def test_no_cycle_between_packages(edges: dict[tuple[str, str], list[str]]) -> None:
    assert find_cycle(set(edges)) is None


def test_relative_imports_resolve(tmp_path: Path) -> None:
    root = tmp_path / "kernelrl"
    (root / "low").mkdir(parents=True)
    (root / "high" / "sub").mkdir(parents=True)
    for init in ("__init__.py", "low/__init__.py", "high/__init__.py", "high/sub/__init__.py"):
        (root / init).write_text("")
    (root / "low" / "mod.py").write_text("def f():\n    from ..high.sub import deep\n    from . import sibling\n")
    (root / "high" / "sub" / "__init__.py").write_text("from .. import x\nfrom ...low import mod\n")
    assert sorted(package_edges(root)) == [("high", "low"), ("low", "high")]
    assert find_cycle(set(package_edges(root))) == ["high", "low", "high"]
