"""The validity check catches each kind of broken or degenerate task."""

from __future__ import annotations

import pytest

from kernelrl.tasks.validate import CHECKS, validate_source

TEMPLATE = """
import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("torch.relu(x)", None),
        ("undefined_name(x)", "runs"),
        ("x + torch.randn(n)", "deterministic"),
        ("x / 0.0", "finite"),
        ("torch.zeros(8) + n", "input-dependent"),
        ("x.sum() * torch.ones(8)", "not-constant"),
    ],
)
def test_each_problem_is_detected(body: str, problem: str | None) -> None:
    check = validate_source(TEMPLATE.format(body=body), runtime_ms=None)
    assert check.first_problem == problem, check.problems
    assert problem is None or problem in CHECKS


def test_syntax_error_and_runtime_window() -> None:
    assert validate_source("def broken(:\n", runtime_ms=None).first_problem == "loads"
    check = validate_source(TEMPLATE.format(body="torch.relu(x)"), runtime_ms=(1000.0, 2000.0))
    assert check.first_problem == "runtime" and check.runtime_ms is not None and check.runtime_ms < 1000.0
