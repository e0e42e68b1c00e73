"""Task metadata: from a `TASK_META = {...}` literal in the source, or a JSON/YAML sidecar file."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import yaml

from kernelrl.tasks.task import TaskError

META_NAME = "TASK_META"
META_FIELDS = {"id", "level", "dtype", "rtol", "atol", "seed", "tags", "notes", "profiles"}
DTYPES = {"float32", "float64", "float16", "bfloat16"}


def parse_module(source: str, where: str) -> ast.Module:
    """Parse task source, or raise a TaskError naming `where` and the line."""
    try:
        return ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise TaskError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from None


def check_contract(tree: ast.Module, where: str) -> None:
    """A task defines class Model, get_inputs() and get_init_inputs() at module level."""
    names = {
        node.name for node in tree.body if isinstance(node, ast.ClassDef | ast.FunctionDef)
    } | {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise TaskError(f"{where}: not a KernelBench-format task, missing {', '.join(missing)}")


def metadata_from_source(tree: ast.Module, where: str) -> dict[str, Any]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == META_NAME for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise TaskError(f"{where}: {META_NAME} (line {node.lineno}) must be a literal dict") from None
            if not isinstance(value, dict):
                raise TaskError(f"{where}: {META_NAME} (line {node.lineno}) must be a dict")
            return value
    return {}


def metadata_from_sidecar(path: Path) -> dict[str, Any]:
    for suffix in (".json", ".yaml", ".yml"):
        sidecar = path.with_suffix(suffix)
        if sidecar.exists():
            try:
                text = sidecar.read_text()
                data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
            except (json.JSONDecodeError, yaml.YAMLError) as exc:
                raise TaskError(f"{sidecar}: cannot parse metadata: {exc}") from None
            if not isinstance(data, dict):
                raise TaskError(f"{sidecar}: metadata must be a mapping")
            return data
    return {}


def validate_metadata(meta: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = set(meta) - META_FIELDS
    if unknown:
        raise TaskError(f"{where}: unknown metadata keys {sorted(unknown)}; known: {sorted(META_FIELDS)}")
    if "dtype" in meta and meta["dtype"] not in DTYPES:
        raise TaskError(f"{where}: dtype {meta['dtype']!r} is not one of {sorted(DTYPES)}")
    for key in ("rtol", "atol"):
        if key in meta and (not isinstance(meta[key], int | float) or meta[key] < 0):
            raise TaskError(f"{where}: {key} must be a non-negative number")
    if "tags" in meta and not (isinstance(meta["tags"], list) and all(isinstance(t, str) for t in meta["tags"])):
        raise TaskError(f"{where}: tags must be a list of strings")
    if "profiles" in meta:
        validate_profiles(meta["profiles"], where)
    return dict(meta)


def validate_profiles(profiles: Any, where: str) -> None:
    """`profiles` maps a profile name (e.g. "gpu") to size overrides {CONSTANT: positive int}."""
    if not isinstance(profiles, dict):
        raise TaskError(f"{where}: profiles must be a mapping of profile name -> {{constant: int}}")
    for name, sizes in profiles.items():
        if not isinstance(name, str) or not isinstance(sizes, dict):
            raise TaskError(f"{where}: profile {name!r} must map constant names to integers")
        for key, value in sizes.items():
            if not isinstance(key, str) or type(value) is not int or value < 1:
                raise TaskError(f"{where}: profile {name!r}: {key!r} must be a positive integer, got {value!r}")
