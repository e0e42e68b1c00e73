"""The red-team corpus: every exploit is caught with the right reason, no legitimate kernel is flagged.

The corpus ships in the package (`kernelrl/evaluate/redteam_corpus`). All cases run once through one
real, sandboxed pool; each case is then its own test. A case marked `redteam-escapes-before` is a known
escape until that change lands: an expected failure (xfail, not strict), reported as XPASS once caught.
"""

from __future__ import annotations

import pytest

from kernelrl.evaluate.redteam import CORPUS, Outcome, load_cases, run_cases
from kernelrl.evaluate.sandbox import bwrap_available

CASES = load_cases(CORPUS)


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcome]:
    runnable = [c for c in CASES if bwrap_available() or not c.needs_sandbox]
    return {o.case.name: o for o in run_cases(runnable, CORPUS, workers=2)}


def test_corpus_size() -> None:
    exploits = [c for c in CASES if not c.legit]
    assert len(exploits) >= 60 and len({c.cls for c in exploits}) >= 20
    assert sum(c.legit for c in CASES) >= 23


def test_corpus_is_package_data() -> None:
    """The corpus lives inside the package (so a wheel carries it), and every task a case names exists."""
    assert CORPUS.parent.name == "evaluate" and (CORPUS / "cases").is_dir()
    assert all((CORPUS / "tasks" / f"{c.task}.py").is_file() for c in CASES)


def _param(case):
    """A case; one marked `redteam-escapes-before` is an expected failure (XPASS once it is caught)."""
    if not case.escapes_before:
        return case
    return pytest.param(case, marks=pytest.mark.xfail(reason=f"known escape until {case.escapes_before}", strict=False))


@pytest.mark.parametrize("case", [_param(c) for c in CASES], ids=[c.name for c in CASES])
def test_case_verdict(case, outcomes: dict[str, Outcome]) -> None:
    if case.name not in outcomes:
        pytest.skip("needs bubblewrap, which is not available here")
    outcome = outcomes[case.name]
    speedup = outcome.result.speedup
    assert outcome.passed, (
        f"{case.name}: expected {sorted(case.expect)} ({case.reason}), got {outcome.result.status}"
        f"{'' if speedup is None else f' at {speedup:.2f}x'}: {outcome.result.error}"
    )
