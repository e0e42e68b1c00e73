"""The benchmark runner in-process: concurrency, resumability, reports, export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelrl.agent import EpisodeConfig, ScriptedPolicy
from kernelrl.bench import BenchConfig, ResumeMismatch, RunStore, export_jsonl, run_bench, write_report
from kernelrl.evaluate import EvalPool
from kernelrl.tasks import load_tasks
from tests.agent.helpers import EVAL, example_kernel, fenced, write_suite
from tests.evaluate import candidates as C

ANSWERS = {
    "level1/1_scaled_relu": [fenced(C.C_COMPILE_ERROR), fenced(C.GOOD)],
    "level2/1_scale_bias_relu": [fenced(example_kernel())],
}


@pytest.fixture
def tasks(tmp_path: Path):
    return load_tasks(write_suite(tmp_path / "suite"))


def config(samples: int = 2, turns: int = 2) -> BenchConfig:
    return BenchConfig(samples=samples, episode=EpisodeConfig(max_turns=turns, target_speedup=0.01), eval=EVAL, concurrency=4)


def test_run_resume_and_more_samples(tmp_path: Path, tasks, pool: EvalPool) -> None:
    out = tmp_path / "run"
    policy = ScriptedPolicy(ANSWERS)
    first = run_bench(tasks, policy, out, config(samples=2), pool=pool, progress=False)
    assert first.ran == 4 and first.skipped == 0 and len(first.trajectories) == 4
    by_key = {(t.task_id, t.sample): t for t in first.trajectories}
    assert [t.status for t in by_key[("level1/1_scaled_relu", 1)].turns] == ["compile_error", "ok"]
    assert [t.status for t in by_key[("level2/1_scale_bias_relu", 0)].turns] == ["ok"]
    assert sum(policy.calls(t.id, s) for t in tasks for s in range(2)) == 6

    again_policy = ScriptedPolicy(ANSWERS)
    again = run_bench(tasks, again_policy, out, config(samples=2), pool=pool, progress=False)
    assert again.ran == 0 and again.skipped == 4 and len(again.trajectories) == 4
    assert sum(again_policy.calls(t.id, s) for t in tasks for s in range(2)) == 0  # no work repeated

    more = run_bench(tasks, again_policy, out, config(samples=3), pool=pool, progress=False)
    assert more.ran == 2 and more.skipped == 4
    assert {again_policy.calls(t.id, 2) for t in tasks} == {2, 1} and again_policy.calls(tasks[0].id, 0) == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    keys = [(json.loads(x)["task_id"], json.loads(x)["sample"]) for x in lines]
    assert len(keys) == len(set(keys)) == 6

    with pytest.raises(ResumeMismatch, match="episode"):
        run_bench(tasks, again_policy, out, config(samples=3, turns=5), pool=pool, progress=False)


def test_a_torn_last_line_is_dropped_and_rerun(tmp_path: Path, tasks, pool: EvalPool) -> None:
    out = tmp_path / "run"
    run_bench(tasks, ScriptedPolicy(ANSWERS), out, config(samples=1), pool=pool, progress=False)
    results = out / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # died while writing the second line
    store = RunStore(out)
    assert len(store.load()) == 1 and results.read_text() == lines[0]
    policy = ScriptedPolicy(ANSWERS)
    rerun = run_bench(tasks, policy, out, config(samples=1), pool=pool, progress=False)
    assert rerun.ran == 1 and rerun.skipped == 1 and len(results.read_text().splitlines()) == 2
    torn_key = json.loads(lines[1])["task_id"]
    assert policy.calls(torn_key, 0) >= 1 and policy.calls(json.loads(lines[0])["task_id"], 0) == 0


def test_report_plots_and_export(tmp_path: Path, tasks, pool: EvalPool) -> None:
    out = tmp_path / "run"
    run = run_bench(tasks, ScriptedPolicy(ANSWERS), out, config(samples=2), pool=pool, progress=False)
    summary = write_report(run.trajectories, out, title="test run")
    assert summary["overall"]["correct_rate"] == 1.0 and summary["by_turn"][0]["correct_rate"] == 0.5
    report = (out / "report.md").read_text()
    for needle in ("# test run", "KernelBench", "Dr. Kernel", "## By turn", "## By level", "pass@2", "plots/fast_p.png",
                   "fast_p vs torch.compile: not measured"):
        assert needle in report, needle
    for name in ("speedup_distribution", "fast_p", "per_turn", "per_level"):
        assert (out / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "summary.json").read_text())["overall"]["samples"] == 4

    assert export_jsonl(run.trajectories, tmp_path / "turns.jsonl", "turns") == 6
    records = [json.loads(x) for x in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert {r["result"]["status"] for r in records} == {"compile_error", "ok"}
    assert all(r["messages"][-1]["role"] == "assistant" and "reward" in r for r in records)
    assert export_jsonl(run.trajectories, tmp_path / "sft.jsonl", "sft") == 4
    assert export_jsonl(run.trajectories, tmp_path / "rft.jsonl", "rft", min_speedup=1e9) == 0


class FailsOnOneTask(ScriptedPolicy):
    """A policy with a bug for one task: the runner must report it, keep going, and retry it later."""

    def complete(self, messages, tools=None, context=None):
        if context is not None and context.task_id == "level1/1_scaled_relu":
            raise RuntimeError("policy bug")
        return super().complete(messages, tools, context)


def test_an_episode_that_raises_is_reported_and_retried(tmp_path: Path, tasks, pool: EvalPool, capsys) -> None:
    out = tmp_path / "run"
    run = run_bench(tasks, FailsOnOneTask(ANSWERS), out, config(samples=2), pool=pool, progress=False)
    assert run.errors == 2 and run.ran == 2 and {t.task_id for t in run.trajectories} == {"level2/1_scale_bias_relu"}
    assert "policy bug" in capsys.readouterr().err
    retry = run_bench(tasks, ScriptedPolicy(ANSWERS), out, config(samples=2), pool=pool, progress=False)
    assert retry.ran == 2 and retry.skipped == 2 and retry.errors == 0 and len(retry.trajectories) == 4
