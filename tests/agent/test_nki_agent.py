"""NKI-Agent's compile-verify-fix loop on the real gym: the `nki-draft` policy gets the NKI interpreter's
compile error through the `compile` tool, repairs it from that text and ends `ok`; the binary `compile`
reward from the registry. (The scripted author is a test double of the agent loop; `kernelrl repro nki-agent`
uses a tiny model that learns: tests/repro/test_nki_agent_repro.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelrl.agent.episode import EpisodeConfig, run_episode
from kernelrl.agent.nki_mistakes import with_mistakes
from kernelrl.agent.policies import NkiDraftPolicy, make_policy
from kernelrl.agent.prompts import PromptConfig
from kernelrl.cli import main
from kernelrl.evaluate import EvalPool
from kernelrl.evaluate.candidate import Candidate
from kernelrl.rewards import get_reward
from kernelrl.tasks import load_solutions, suite_path

RELU = "level1/01_ReLU"


def _relu() -> tuple[object, str]:
    solution = next(s for s in load_solutions("nki", level=1) if s.task.id == RELU)
    return solution.task, solution.source


def test_the_agent_reads_a_partition_error_from_the_compile_tool_and_fixes_it(pool: EvalPool) -> None:
    task, _ = _relu()
    policy = make_policy("nki-draft", forced={RELU: {"partition"}}, fix_rate=1.0)
    nki = PromptConfig(backend="nki")
    single = run_episode(task, policy, pool, EpisodeConfig(prompt=nki)).turns[0]
    assert single.result.status == "compile_error" and "err-partition-dim" in single.result.error

    turn = run_episode(task, policy, pool, EpisodeConfig(tools=True, prompt=nki)).turns[0]
    calls = [c["function"]["name"] for m in turn.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answers = [json.loads(m["content"]) for m in turn.messages if m["role"] == "tool"]
    assert calls == ["compile", "compile", "verify"]
    assert answers[0]["compiled"] is False and "partition dimension 256" in answers[0]["error"]
    assert answers[1] == {"compiled": True} and answers[2]["status"] == "ok"
    assert turn.result.status == "ok" and turn.tool_calls == 3
    assert get_reward("compile")(single.result) == 0.0 and get_reward("compile")(turn.result) == 1.0


def test_the_compile_reward_pays_a_kernel_that_compiles_but_never_stores(pool: EvalPool) -> None:
    """NKI-Agent's binary compile reward: 1 for a kernel that compiles and runs, right or wrong."""
    task, source = _relu()
    result = pool.evaluate(task, Candidate(with_mistakes(source, {"missing_store"}), "nki"))
    assert result.status == "incorrect" and "got nan" in result.error
    assert get_reward("compile")(result) == 1.0 and get_reward("binary")(result) == 0.0


def test_bench_cli_and_policy_reject_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    relu = str(suite_path(1, backend="nki") / "01_ReLU.py")
    assert main(["bench", "--suite", relu, "--policy", "nki-draft", "--out", str(tmp_path / "run")]) == 2
    assert "--policy nki-draft writes NKI kernels only; pass --backend nki" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown kind"):
        NkiDraftPolicy(forced={RELU: {"partition", "typo"}})
