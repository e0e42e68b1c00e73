"""The pool end to end: real compiles, real forked processes, every kind of bad candidate.

After each bad candidate the same pool must still evaluate a good one correctly.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, StageTimeouts, Status
from kernelrl.evaluate.costs import summarise_costs
from kernelrl.tasks import Task, example_path, load_task
from tests.evaluate import candidates as C

# These tests prove the pool survives bad candidates, so the anti-hacking policy is relaxed to let the
# candidates reach the stages under test (tests/redteam covers the policy itself).
CONFIG = EvalConfig(
    guards=False,
    static_severity={"*": "warn"},
    correctness_trials=5,
    timing_trials=5,
    timing_budget_s=0.2,
    memory_limit_mb=4096,
    output_limit_mb=16,
    timeouts=StageTimeouts(build=60, init=10, correctness=4, timing=20),
)


@pytest.fixture(scope="module")
def pool():
    with EvalPool(workers=2, config=CONFIG) as pool:
        yield pool


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(id="test/scaled_relu", source=C.RELU_TASK)


def check_pool_still_works(pool: EvalPool, task: Task) -> None:
    result = pool.evaluate(task, Candidate(C.GOOD))
    assert result.status == Status.OK, result.feedback


def test_shipped_example_is_correct_and_faster(pool: EvalPool) -> None:
    task, candidate = load_task(example_path("scale_bias_relu.py")), Candidate.from_file(example_path("scale_bias_relu_cpu.py"))
    result = pool.evaluate(task, candidate, EvalConfig())  # the full anti-hacking policy
    assert result.status == Status.OK, result.feedback
    assert result.correctness.passed == 5
    assert result.timing.speedup > 1.0
    assert result.kernel_calls == {"scale_bias_relu": 5}
    assert [s.name for s in result.stages] == ["static", "build", "init", "correctness", "timing"]


def test_result_round_trips_through_json(pool: EvalPool, task: Task) -> None:
    from kernelrl.evaluate import EvalResult

    result = pool.evaluate(task, Candidate(C.GOOD))
    again = EvalResult.from_json(result.to_json())
    assert again == result and again.schema_version == 1


@pytest.mark.parametrize(
    ("source", "status", "needle"),
    [
        (C.SYNTAX_ERROR, Status.COMPILE_ERROR, "SyntaxError"),
        (C.NO_MODEL_NEW, Status.COMPILE_ERROR, "ModelNew"),
        (C.WRONG_SIGNATURE, Status.RUNTIME_ERROR, "same constructor arguments"),
        (C.WRONG_SHAPE, Status.INCORRECT, "shape (4095,), expected (4096,)"),
        (C.WRONG_DTYPE, Status.INCORRECT, "dtype torch.float64, expected torch.float32"),
        (C.WRONG_TYPE, Status.INCORRECT, "expected a tensor, got str"),
        (C.WRONG_VALUES, Status.INCORRECT, "elements differ"),
        (C.RAISES, Status.RUNTIME_ERROR, "ValueError: boom in forward"),
        (C.INFINITE_LOOP, Status.TIMEOUT, "stage 'correctness' exceeded"),
        (C.SEGFAULT_KERNEL, Status.CRASHED, "segmentation fault"),
        (C.HUGE_ALLOCATION, Status.RUNTIME_ERROR, "alloc"),
        (C.EXIT_EARLY, Status.CRASHED, "exited with status 0 before reporting a result"),
        (C.C_COMPILE_ERROR, Status.COMPILE_ERROR, "undefined_symbol"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_bad_candidates_get_a_clear_verdict(pool: EvalPool, task: Task, source: str, status: Status, needle: str) -> None:
    result = pool.evaluate(task, Candidate(source))
    assert result.status == status, result.feedback
    assert needle.lower() in result.error.lower(), result.error
    assert result.feedback.startswith(f"status: {status}")
    check_pool_still_works(pool, task)


def test_python_errors_point_into_the_candidate(pool: EvalPool, task: Task) -> None:
    result = pool.evaluate(task, Candidate(C.RAISES))
    line = C.RAISES.splitlines().index("        raise ValueError('boom in forward')") + 1
    assert f"candidate.py line {line}" in result.error


def test_compiler_errors_map_to_candidate_lines(pool: EvalPool, task: Task) -> None:
    result = pool.evaluate(task, Candidate(C.C_COMPILE_ERROR))
    line = next(i for i, text in enumerate(C.C_COMPILE_ERROR.splitlines(), 1) if "undefined_symbol" in text)
    assert f"candidate.py:{line}" in result.error, result.error


def test_megabytes_of_output_are_truncated(pool: EvalPool, task: Task) -> None:
    result = pool.evaluate(task, Candidate(C.PRINTS_MEGABYTES))
    assert result.status == Status.OK
    assert len(result.output_tail) < 10_000 and "bytes cut" in result.output_tail
    check_pool_still_works(pool, task)


def test_non_utf8_output_is_decoded(pool: EvalPool, task: Task) -> None:
    result = pool.evaluate(task, Candidate(C.NON_UTF8_OUTPUT))
    assert result.status == Status.OK
    assert "\ufffd" in result.output_tail and "not utf-8" in result.output_tail


def test_output_flood_past_the_limit_is_a_crash(task: Task) -> None:
    config = EvalConfig(output_limit_mb=1, measure_timing=False, guards=False, static_severity={"*": "warn"})
    with EvalPool(workers=1, config=config) as small:
        result = small.evaluate(task, Candidate(C.PRINTS_MEGABYTES))
        assert result.status == Status.CRASHED and "output file size limit" in result.error
        check_pool_still_works(small, task)


def test_evaluate_many_returns_every_result(pool: EvalPool, task: Task) -> None:
    sources = [C.GOOD, C.RAISES, C.WRONG_VALUES, C.GOOD, C.SYNTAX_ERROR, C.GOOD]
    results = dict(pool.evaluate_many((task, Candidate(s)) for s in sources))
    assert sorted(results) == list(range(len(sources)))
    assert [results[i].status for i in range(len(sources))] == [
        Status.OK, Status.RUNTIME_ERROR, Status.INCORRECT, Status.OK, Status.COMPILE_ERROR, Status.OK
    ]


def test_reference_timing_is_cached_by_the_pool(task: Task) -> None:
    """The reference is timed once, in a process of its own, and reused by the pool's later jobs."""
    with EvalPool(workers=2, config=CONFIG) as pair:
        first = pair.evaluate(task, Candidate(C.GOOD))
        later = [pair.evaluate(task, Candidate(C.GOOD)) for _ in range(3)]  # whichever worker takes them
    assert not first.timing.reference_cached
    assert all(r.timing.reference_cached and r.timing.reference_ms == first.timing.reference_ms for r in later)
    assert any("separate process" in note for note in first.notes)


def test_the_reference_is_timed_once_per_task_whatever_the_verdicts(task: Task) -> None:
    """Trusted material once per task: candidates that fail do not make the next one time it again."""
    with EvalPool(workers=2, config=CONFIG) as pair:
        failed = [pair.evaluate(task, Candidate(s)) for s in (C.WRONG_VALUES, C.RAISES, C.WRONG_VALUES)]
        good = [pair.evaluate(task, Candidate(C.GOOD)) for _ in range(2)]
        assert len(pair._references) == 1
    assert [r.status for r in failed] == [Status.INCORRECT, Status.RUNTIME_ERROR, Status.INCORRECT]
    assert all(r.status == Status.OK and r.timing.reference_cached for r in good)
    assert good[0].timing.reference_ms == good[1].timing.reference_ms
    costs = summarise_costs(pair.cost_log)
    assert costs["evaluations"]["n"] == 5 and costs["reference"]["n"] == 1  # the one job that measured it
    assert costs["timing"]["n"] == 2 and costs["correctness"]["n"] == 5 and costs["fork_teardown"]["n"] == 5
    assert all(row["total"] >= row["build"] + row["correctness"] + row["fork_teardown"] for row in pair.cost_log)
    assert costs["spawn"]["n"] == 5 and costs["teardown"]["n"] == 5  # the supervisor's own parts, measured
    assert all(row["spawn"] + row["teardown"] <= row["fork_teardown"] + 1e-3 for row in pair.cost_log)


def test_a_prefetched_reference_is_ready_before_the_first_candidate(task: Task) -> None:
    """The trainer prefetches each prompt's reference while its answers generate: the first candidate then
    finds it measured, and a second prefetch of the same task is a no-op."""
    with EvalPool(workers=1, config=CONFIG) as one:
        future = one.prefetch(task)
        assert future is not None and future.result(timeout=120)["reference_ms"] > 0
        assert one.prefetch(task) is None
        result = one.evaluate(task, Candidate(C.GOOD))
        assert result.status == Status.OK and result.timing.reference_cached
        assert result.timing.reference_ms == future.result()["reference_ms"]
        assert all(row["reference"] == 0 for row in one.cost_log)  # measured by the prefetch, not by the job
    costs = summarise_costs(one.cost_log, one.reference_log)
    assert "reference" not in costs  # no evaluation measured one, yet the prefetch's is counted on its own
    assert costs["reference_timings"]["n"] == 1 and costs["reference_timings"]["sum_s"] > 0


def test_a_reference_prefetched_ahead_waits_for_the_evaluations_queued_after_it(task: Task) -> None:
    """A reference prefetched `ahead` (the next RL step's task) runs only when no evaluation is queued: an
    evaluation submitted after it is judged first. A plain prefetch of the same task still jumps the queue,
    and `close` cancels what is still queued ahead instead of measuring it."""
    later_task = Task(id="test/scaled_relu_next_step", source=C.RELU_TASK + "\n# the next step's task\n")
    done: list[str] = []
    with EvalPool(workers=1, config=CONFIG) as one:
        busy = one.submit(task, Candidate(BURNS_CPU_IN_INIT))  # holds the only worker for a while
        ahead = one.prefetch(later_task, ahead=True)
        assert ahead is not None and one.prefetch(later_task, ahead=True) is None  # queued once
        evaluation = one.submit(task, Candidate(C.GOOD))
        for name, future in (("busy", busy), ("ahead", ahead), ("evaluation", evaluation)):
            future.add_done_callback(lambda _f, name=name: done.append(name))
        assert evaluation.result(timeout=120).status == Status.OK
        assert ahead.result(timeout=120)["reference_ms"] > 0
        assert done == ["busy", "evaluation", "ahead"]
        assert one.prefetch(later_task) is None  # measured: at hand

        third = Task(id="test/scaled_relu_third", source=C.RELU_TASK + "\n# a third task\n")
        busy = one.submit(task, Candidate(BURNS_CPU_IN_INIT))
        queued_ahead = one.prefetch(third, ahead=True)
        now = one.prefetch(third)  # its candidates are coming now: first in line after all
        assert queued_ahead is not None and now is not None
        assert now.result(timeout=120)["reference_ms"] > 0
        assert queued_ahead.result(timeout=120) == now.result()  # found it measured: timed once

        fourth = Task(id="test/scaled_relu_fourth", source=C.RELU_TASK + "\n# a fourth task\n")
        busy = one.submit(task, Candidate(BURNS_CPU_IN_INIT))
        cancelled = one.prefetch(fourth, ahead=True)
        assert cancelled is not None
    assert busy.done() and cancelled.cancelled()
    assert len(one.reference_log) == 3  # task, later_task, third: the fourth was never measured


BURNS_CPU_IN_INIT = "import time\n" + C.GOOD.replace(
    "        self.scale = scale",
    "        self.scale = scale\n        start = time.process_time()\n"
    "        while time.process_time() - start < 0.3:\n            pass",
    1,
)


def test_each_evaluation_reports_the_cpu_of_its_judge_and_its_candidate(pool: EvalPool, task: Task) -> None:
    """The cost breakdown's CPU rows: a candidate that spins for 0.3 s of CPU in its constructor shows it as the
    candidate's, not the judge's; an ordinary one costs both processes little."""
    plain, burner = pool.evaluate(task, Candidate(C.GOOD)), pool.evaluate(task, Candidate(BURNS_CPU_IN_INIT))
    assert plain.status == Status.OK and burner.status == Status.OK, (plain.feedback, burner.feedback)
    assert 0 < plain.costs["candidate_cpu"] < 0.25 and plain.costs["judge_cpu"] > 0
    assert burner.costs["candidate_cpu"] >= 0.28
    assert burner.costs["judge_cpu"] < burner.costs["candidate_cpu"] - 0.2
    costs = summarise_costs(pool.cost_log[-2:])
    assert costs["candidate_cpu"]["n"] == 2 and costs["candidate_cpu"]["sum_s"] >= 0.28
    assert costs["judge_cpu"]["n"] == 2


SLOW_DOWN_REFERENCE = C.GOOD.replace(
    "lib = load_cpp(",
    """import sys
import time

reference = sys.modules.get("kernelrl_reference")  # the task's module, loaded in this process first
if reference is not None:
    original = reference.Model.forward

    def slowed(self, *args):
        time.sleep(0.03)
        return original(self, *args)

    reference.Model.forward = slowed

lib = load_cpp(""",
)


def test_a_candidate_cannot_slow_the_reference_it_is_compared_with(task: Task) -> None:
    """A candidate that wraps the reference's forward in a sleep (static checks waived here) would look
    ~100x faster if the reference were timed in its process; it is timed in a process of its own."""
    assert SLOW_DOWN_REFERENCE != C.GOOD
    with EvalPool(workers=1, config=CONFIG) as single:
        hacked = single.evaluate(task, Candidate(SLOW_DOWN_REFERENCE))  # the worker's first job on this task
    assert hacked.status == Status.OK, hacked.feedback
    assert hacked.timing.reference_ms < 15  # a 30 ms sleep per reference call never reached the timing
    assert hacked.timing.speedup < 5


def test_a_killed_worker_is_replaced_and_the_job_rerun(task: Task) -> None:
    slow = C.forward_body("        import time\n        time.sleep(1.5)\n        return torch.relu(x) * self.scale")
    relaxed = EvalConfig(correctness_trials=1, measure_timing=False, guards=False, static_severity={"*": "warn"})
    with EvalPool(workers=1, config=relaxed) as single:
        future = single.submit(task, Candidate(slow))
        time.sleep(0.8)
        supervisors = [
            int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _is_supervisor(int(pid))
        ]
        assert supervisors
        for pid in supervisors:
            os.kill(pid, signal.SIGKILL)
        result = future.result(timeout=120)
        assert result.status == Status.OK, result.feedback
        assert single.restarts >= 1


def _is_supervisor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as handle:
            parent = int(handle.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return False
    return b"kernelrl.evaluate.supervisor" in cmdline and parent == os.getpid()
