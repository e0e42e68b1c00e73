"""Static checks on the candidate's syntax tree: a hook point with one registry of checks.

Each check has an id, a default severity (`reject` or `warn`) and a message that teaches the model
what to do instead. The anti-hacking set registers more checks here.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from kernelrl.evaluate.backends.base import Backend
from kernelrl.registry import Registry


@dataclass
class Finding:
    check: str
    severity: str  # reject | warn
    message: str
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


StaticCheck = Callable[[ast.Module, str, Backend], list[Finding]]
STATIC_CHECKS: Registry[StaticCheck] = Registry("static check")


@STATIC_CHECKS.register("defines-model-new")
def defines_model_new(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)} | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    if "ModelNew" in names:
        return []
    return [Finding("defines-model-new", "reject", "the candidate must define `class ModelNew(nn.Module)` at module level")]


@STATIC_CHECKS.register("uses-kernel")
def uses_kernel(tree: ast.Module, source: str, backend: Backend) -> list[Finding]:
    if backend.defines_kernel(tree):
        return []
    return [Finding("uses-kernel", "reject", f"no {backend.name} kernel found: {backend.kernel_hint()}")]


def run_static_checks(
    tree: ast.Module, source: str, backend: Backend, severities: dict[str, str] | None = None
) -> list[Finding]:
    """All registered checks; `severities` overrides a check's severity by id (policy per task/backend)."""
    findings = []
    for name in STATIC_CHECKS.names():
        for finding in STATIC_CHECKS.get(name)(tree, source, backend):
            if severities and (finding.check in severities or "*" in severities):
                finding.severity = severities.get(finding.check, severities.get("*", finding.severity))
            findings.append(finding)
    return findings


# The anti-hacking checks register themselves on import.
from kernelrl.evaluate import static_hacking  # noqa: E402, F401
