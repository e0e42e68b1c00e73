"""Episodes with the scripted policy: stopping rules, records, replay of saved answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernelrl.agent import EpisodeConfig, ScriptedPolicy, Trajectory, default_reward, run_episode
from kernelrl.evaluate import EvalPool, EvalResult, Status, Timing
from kernelrl.rewards import get_reward
from tests.agent import helpers as H
from tests.agent.helpers import example_kernel, example_task, fenced, relu_task
from tests.evaluate import candidates as C


def test_stops_when_the_target_speedup_is_reached(pool: EvalPool) -> None:
    policy = ScriptedPolicy([fenced(H.WRONG_KERNEL), fenced(example_kernel()), fenced(H.BAD_CALL)])
    traj = run_episode(example_task(), policy, pool, EpisodeConfig(max_turns=5, target_speedup=0.05))
    assert [t.status for t in traj.turns] == ["incorrect", "ok"]
    assert traj.stop_reason == "target_reached" and policy.calls(example_task().id) == 2
    assert traj.turns[1].speedup and traj.turns[1].speedup >= 0.05


def test_unreachable_target_runs_all_turns_and_keeps_the_best(pool: EvalPool) -> None:
    policy = ScriptedPolicy({"test/scaled_relu": [fenced(C.GOOD), "no code this time", fenced(H.SHORT_OUTPUT)]})
    traj = run_episode(relu_task(), policy, pool, EpisodeConfig(max_turns=3, target_speedup=1e9, feedback_mode="json"))
    assert [t.status for t in traj.turns] == ["ok", "no_code", "incorrect"]
    assert traj.stop_reason == "max_turns" and traj.best_turn is traj.turns[0]
    assert traj.turns[1].code is None and traj.turns[1].result is None and traj.turns[1].reward == 0.0
    # json feedback: the model saw the compact result of turn 1 before answering turn 2
    shown = traj.turns[1].messages[-2]["content"]
    assert json.loads(shown.split("\n")[1])["status"] == "ok"
    # all-history mode: turn 3 saw every earlier exchange
    assert [m["role"] for m in traj.turns[2].messages] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]


def test_trajectory_round_trips_through_json(pool: EvalPool) -> None:
    traj = run_episode(relu_task(), ScriptedPolicy([fenced(C.GOOD)]), pool, EpisodeConfig(max_turns=1), sample=3)
    again = Trajectory.from_json(traj.to_json())
    assert again == traj and again.sample == 3 and again.turns[0].result.status == "ok"
    # the default reward is the registry's `speedup`: a correct kernel earns max(0.1, 1 + min(3, log2 s)),
    # below 1 when it runs slower than the reference, so only the scoring path is pinned here
    assert again.turns[0].reward == default_reward(traj.turns[0].result) == get_reward("speedup")(traj.turns[0].result)


def test_replay_answers_from_files_and_saved_runs(tmp_path: Path, pool: EvalPool) -> None:
    answers = tmp_path / "answers" / "test__scaled_relu"
    answers.mkdir(parents=True)
    (answers / "0.md").write_text(fenced(H.BAD_CALL))
    (answers / "1.md").write_text(fenced(C.GOOD))
    first = run_episode(relu_task(), ScriptedPolicy(tmp_path / "answers"), pool, EpisodeConfig(max_turns=2))
    assert [t.status for t in first.turns] == ["runtime_error", "ok"]
    assert "takes 4 arguments" in first.turns[1].messages[-2]["content"]  # the fix saw the error
    saved = tmp_path / "results.jsonl"
    saved.write_text(first.to_json() + "\n")
    replayed = run_episode(relu_task(), ScriptedPolicy(saved), pool, EpisodeConfig(max_turns=2))
    assert [t.response for t in replayed.turns] == [t.response for t in first.turns]
    assert [t.status for t in replayed.turns] == ["runtime_error", "ok"]


def test_default_reward() -> None:
    def result(status: str, speedup: float | None = None, meaningful: bool = True) -> EvalResult:
        timing = None if speedup is None else Timing(speedup=speedup, meaningful=meaningful)
        return EvalResult(status=Status(status), task_id="t", backend="cpu", timing=timing)

    assert default_reward(None) == 0.0
    assert default_reward(result("incorrect", 4.0)) == 0.0
    assert default_reward(result("ok")) == 1.0
    assert default_reward(result("ok", 4.0)) == 3.0  # 1 + log2 4
    assert default_reward(result("ok", 0.5)) == pytest.approx(0.1)  # 1 + log2 0.5 = 0, floored: correct beats wrong
    assert default_reward(result("ok", 0.8)) == pytest.approx(1.0 + math.log2(0.8))
    assert default_reward(result("ok", 4.0, meaningful=False)) == 1.0
    assert default_reward(result("ok", 1000.0)) == 4.0  # log term capped at 3
    assert default_reward(result("ok", 4.0), "binary") == 1.0  # another registry reward by name
    assert default_reward(result("ok", 4.0), cap=1.0) == 2.0  # options reach the reward
