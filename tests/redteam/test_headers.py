"""Case headers and how an outcome is judged (no pool: results are made up here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelrl.evaluate.redteam import Case, Outcome, load_cases
from kernelrl.evaluate.result import EvalResult, StageReport, Status, Timing


def write_case(corpus: Path, name: str, header: str) -> None:
    (corpus / "cases").mkdir(parents=True, exist_ok=True)
    (corpus / "cases" / f"{name}.py").write_text(header.strip() + "\nimport torch\n")


def test_headers_are_parsed(tmp_path: Path) -> None:
    write_case(tmp_path, "a", """
# redteam-class: thread-budget
# redteam-expect: ok
# redteam-task: scaled_relu
# redteam-max-speedup: 1.5
# redteam-feedback-must-not-contain: root:x:0|build-backend
# redteam-run: alone
# redteam-needs: sandbox
# redteam-escapes-before: trust-split
""")
    write_case(tmp_path, "b", """
# redteam-class: legit
# redteam-expect: ok
# redteam-task: affine
""")
    a, b = load_cases(tmp_path)
    assert (a.max_speedup, a.must_not_contain, a.run_alone, a.needs_sandbox, a.escapes_before) == (
        1.5, ["root:x:0", "build-backend"], True, True, "trust-split")
    assert (b.max_speedup, b.must_not_contain, b.run_alone, b.needs_sandbox, b.escapes_before) == (None, [], False, False, "")


@pytest.mark.parametrize("line", ["# redteam-max-speeedup: 2", "# redteam-run: later", "# redteam-needs: gpu"])
def test_unknown_keys_and_values_are_refused(tmp_path: Path, line: str) -> None:
    write_case(tmp_path, "a", f"# redteam-class: x\n# redteam-expect: ok\n# redteam-task: t\n{line}")
    with pytest.raises(ValueError, match="redteam-"):
        load_cases(tmp_path)


def outcome(case: Case, status: str = "ok", speedup: float | None = 1.0, error: str = "", feedback: str = "",
            output: str = "") -> Outcome:
    timing = Timing(candidate_ms=1.0, reference_ms=speedup, speedup=speedup) if speedup is not None else None
    result = EvalResult(status=Status(status), task_id="t", backend="cpu", error=error, feedback=feedback,
                        output_tail=output, timing=timing, stages=[StageReport("build", "ok", 0.1)])
    return Outcome(case, result, 0.1)


def case(**kwargs) -> Case:
    return Case(name="c", cls="x", expect={"ok"}, task="t", **kwargs)


def test_max_speedup_bounds_an_ok_verdict() -> None:
    bounded = case(max_speedup=1.5)
    assert outcome(bounded, speedup=1.2).passed
    assert not outcome(bounded, speedup=1.8).passed
    assert not outcome(bounded, speedup=None).passed  # an ok without a timing cannot show it stayed under
    lenient = Case(name="c", cls="x", expect={"ok", "rejected"}, task="t", max_speedup=1.5)
    assert outcome(lenient, status="rejected", speedup=None).passed  # the bound is about ok verdicts only


def test_feedback_must_not_contain_checks_everything_a_model_is_shown() -> None:
    secret = Case(name="c", cls="x", expect={"compile_error"}, task="t", must_not_contain=["root:x:0", "build-backend"])
    assert outcome(secret, status="compile_error", error="compiler error: 'root' does not name a type").passed
    for where in ("error", "feedback", "output"):
        leaked = outcome(secret, status="compile_error", **{where: "... root:x:0:0:root ..."})
        assert not leaked.passed, where
    assert not outcome(secret, status="compile_error", error='build-backend = "setuptools"').passed


def test_known_escape_is_a_failure_of_a_marked_case_only() -> None:
    marked = Case(name="c", cls="x", expect={"rejected"}, task="t", escapes_before="trust-split")
    assert outcome(marked, status="ok").known_escape
    assert not outcome(marked, status="rejected", speedup=None).known_escape
    unmarked = Case(name="c", cls="x", expect={"rejected"}, task="t")
    assert not outcome(unmarked, status="ok").known_escape


def test_then_names_a_follow_up_case_that_must_pass_its_own_expectations(tmp_path: Path) -> None:
    write_case(tmp_path, "plant", "# redteam-class: x\n# redteam-expect: ok\n# redteam-task: t\n# redteam-then: probe")
    write_case(tmp_path, "probe", "# redteam-class: legit\n# redteam-expect: ok\n# redteam-task: t")
    plant, probe = load_cases(tmp_path)
    assert (plant.then, plant.run_alone, probe.then, probe.run_alone) == ("probe", True, "", False)
    first = outcome(plant)
    first.then, first.after = probe, outcome(probe).result
    assert first.passed
    first.after = outcome(probe, status="incorrect").result
    assert not first.passed
    write_case(tmp_path, "plant", "# redteam-class: x\n# redteam-expect: ok\n# redteam-task: t\n# redteam-then: nothing")
    with pytest.raises(ValueError, match="redteam-then"):
        load_cases(tmp_path)
