"""The red-team corpus: every exploit is caught with the right reason, no legitimate kernel is flagged.

All cases run once through one real, sandboxed pool; each case is then its own test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelrl.evaluate.redteam import Outcome, load_cases, run_cases
from kernelrl.evaluate.sandbox import bwrap_available

CORPUS = Path(__file__).parent
CASES = load_cases(CORPUS)


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcome]:
    runnable = [c for c in CASES if bwrap_available() or not c.needs_sandbox]
    return {o.case.name: o for o in run_cases(runnable, CORPUS, workers=2)}


def test_corpus_size() -> None:
    exploits = [c for c in CASES if not c.legit]
    assert len(exploits) >= 30 and len({c.cls for c in exploits}) >= 12
    assert sum(c.legit for c in CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_verdict(case, outcomes: dict[str, Outcome]) -> None:
    if case.name not in outcomes:
        pytest.skip("needs bubblewrap, which is not available here")
    outcome = outcomes[case.name]
    assert outcome.passed, (
        f"{case.name}: expected {sorted(case.expect)} ({case.reason}), got {outcome.result.status}: {outcome.result.error}"
    )
