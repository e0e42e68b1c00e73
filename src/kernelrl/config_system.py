"""One configuration system for train, distill, proxy, bench, serve and the gym.

Every config is a `ConfigModel` (pydantic, unknown keys refused, assignments validated) and loads the same
way, `load(Model, preset, path, overrides)`: the model's defaults, then a preset, then a partial YAML/JSON
file laid over it (only the keys it sets; nested mappings merge, lists replace), then dotted ``key=value``
overrides (values parsed as YAML), then one validation. Every problem comes out in one `ConfigError` whose
lines name the dotted field (``eval.timing_trials: must be >= 1``; an unknown key a file set also names the
file), before any work.

Validators name their field by raising ValueError: in a field validator the field is known; a model
validator starts its message with the field (relative to its model) and a colon (``"max_ops: must be
>= min_ops"``), which the error report prefixes with the section's path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound="ConfigModel")
Presets = Path | Mapping[str, Mapping[str, Any]]
Layer = tuple[str, Mapping[str, Any], bool]  # origin (a file's path, "preset 'x'", "overrides"), data, is a file

# pydantic's names for the branches of a union, which it puts into an error's location
_UNION_TAGS = {"str", "int", "float", "bool", "none", "dict", "list", "tuple", "literal"}
_FIELD_FIRST = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.S)
_UNKNOWN = ": unknown key"


class ConfigError(ValueError):
    """A config that does not load: one line per problem, each naming its dotted field."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        self.source = source
        head = f"invalid {source}" if len(problems) != 1 else f"invalid {source}: {problems[0]}"
        super().__init__(head if len(problems) == 1 else head + ":\n" + "\n".join(f"  {p}" for p in problems))


class ConfigModel(BaseModel):
    """Base of every config: unknown keys are errors, assignments are validated, dict/YAML round trip."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(problems(exc), type(self).__name__) from None

    # nested sections validate without calling __init__ (their errors stay located in the parent's report)
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise ConfigError(problems(exc), type(self).__name__) from None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls: type[M], data: Mapping[str, Any], source: str | None = None) -> M:
        """Validated config from plain data; a `ConfigError` naming each bad field otherwise."""
        return validate(cls, dict(data), source)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def replace(self: M, **changes: Any) -> M:
        """A validated copy with `changes` (the `dataclasses.replace` of a config)."""
        return validate(type(self), {**self.to_dict(), **changes})


def problems(exc: ValidationError, prefix: str = "") -> list[str]:
    """One ``dotted.field: message`` line per error of `exc`."""
    lines: list[str] = []
    for err in exc.errors():
        parts = [str(p) if isinstance(p, str) else f"[{p}]" for p in err["loc"]
                 if not (isinstance(p, str) and ("[" in p or p in _UNION_TAGS))]
        dotted = ".".join(([prefix] if prefix else []) + parts).replace(".[", "[")
        kind, msg = err["type"], err["msg"]
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "required"
        else:
            msg = re.sub(r"^(Value error|Assertion failed), ", "", msg).replace("Input should be", "must be")
            if kind not in ("value_error", "assertion_error"):
                msg = f"{msg[:1].lower()}{msg[1:]} (got {_short(err.get('input'))})"
        match = _FIELD_FIRST.match(msg) if isinstance(err.get("input"), dict | BaseModel) else None
        if match:  # a model validator naming its field first
            field, msg = match.groups()
            dotted = f"{dotted}.{field}" if dotted and not field.startswith(dotted + ".") else field
        line = f"{dotted}: {msg}" if dotted else msg
        if line not in lines:
            lines.append(line)
    return lines


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate(model_cls: type[M], data: Mapping[str, Any], source: str | None = None,
             layers: Sequence[Layer] = ()) -> M:
    """`model_cls` from `data`, or one `ConfigError` listing every bad field (`layers`: where `data` came
    from, to name the file that set an unknown key)."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(blame_files(problems(exc), layers), source or _label(model_cls)) from None


def blame_files(lines: list[str], layers: Sequence[Layer]) -> list[str]:
    """`lines` with each ``key: unknown key`` that a file set (the last layer to set it is that file) ending
    ``in FILE``; an unknown key from the overrides stays as it is."""
    out = []
    for line in lines:
        if line.endswith(_UNKNOWN):
            key = line[: -len(_UNKNOWN)]
            last = next(((origin, is_file) for origin, data, is_file in reversed(layers) if _holds(data, key)), None)
            if last is not None and last[1]:
                line = f"{line} in {last[0]}"
        out.append(line)
    return out


def _holds(data: Any, dotted: str) -> bool:
    """`data` has a value at `dotted` (``a.b[0].c``)."""
    node = data
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", dotted):
        if part.startswith("[") and isinstance(node, list) and int(part[1:-1]) < len(node):
            node = node[int(part[1:-1])]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return False
    return True


def _label(model_cls: type) -> str:
    return model_cls.__name__


def read_file(path: str | Path) -> dict[str, Any]:
    """A YAML or JSON mapping from `path`."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError([f"cannot read {p}: {exc.strerror or exc}"], "config") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError([f"{p}: cannot parse: {exc}"], "config") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{p}: a config file must hold a mapping, got {type(data).__name__}"], "config")
    return data


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["rl.algo=rloo", "sft.steps=10"]`` -> nested dict; values parsed as YAML scalars or flow collections."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not k for k in key.split(".")):
            raise ConfigError([f"override {item!r} is not of the form key.sub=value"], "config")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError([f"{key}: cannot parse {raw!r}: {exc}"], "config") from None
        node = out
        for k in key.split(".")[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError([f"{key}: {k!r} is set to a value and also used as a section"], "config")
        node[key.split(".")[-1]] = value
    return out


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`extra` laid over `base`, recursing into mappings (inputs untouched)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def preset_names(presets: Presets) -> list[str]:
    if isinstance(presets, Path):
        return sorted(p.stem for p in presets.glob("*.yaml"))
    return sorted(presets)


def preset_data(name: str, presets: Presets) -> dict[str, Any]:
    """The data of preset `name`: ``<dir>/<name>.yaml`` or ``presets[name]``."""
    if isinstance(presets, Path):
        file = presets / f"{name}.yaml"
        if file.is_file():
            return read_file(file)
    elif name in presets:
        return merge({}, presets[name])
    raise ConfigError([f"preset: unknown preset {name!r}; known: {', '.join(preset_names(presets))}"], "config")


def layers(preset: str | None = None, path: str | Path | None = None, overrides: list[str] | None = None,
           presets: Presets | None = None) -> list[Layer]:
    """The config's layers, lowest first, each with its origin and whether that is a file: the preset, the
    file at `path`, the overrides."""
    out: list[Layer] = []
    if preset is not None:
        if presets is None:
            raise ConfigError([f"preset: this config has no presets (got {preset!r})"], "config")
        out.append((f"preset {preset!r}", preset_data(preset, presets), False))
    if path is not None:
        out.append((str(path), read_file(path), True))
    if overrides:
        out.append(("overrides", parse_overrides(list(overrides)), False))
    return out


def flatten(stack: Sequence[Layer]) -> dict[str, Any]:
    """The layers laid over one another, lowest first."""
    data: dict[str, Any] = {}
    for _, layer, _ in stack:
        data = merge(data, layer)
    return data


def gather(preset: str | None = None, path: str | Path | None = None, overrides: list[str] | None = None,
           presets: Presets | None = None) -> dict[str, Any]:
    """The unvalidated data: preset, then the file laid over it, then the overrides."""
    return flatten(layers(preset, path, overrides, presets))


def load(model_cls: type[M], preset: str | None = None, path: str | Path | None = None,
         overrides: list[str] | None = None, presets: Presets | None = None, source: str | None = None) -> M:
    """Defaults, then the preset, then the YAML/JSON file at `path` laid over it, then dotted `overrides`,
    validated once."""
    stack = layers(preset, path, overrides, presets)
    return validate(model_cls, flatten(stack), source, stack)
