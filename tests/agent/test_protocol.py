"""The episode protocol is shared: bench's `run_episode` and the trainer's families read a response and a
verdict the same way, and plain-text tool calls run through the real gym."""

from __future__ import annotations

import json

from kernelrl.agent import EpisodeConfig, ScriptedPolicy, run_episode
from kernelrl.agent.episode_protocol import AgentProtocol
from kernelrl.agent.tools import ToolExecutor
from kernelrl.evaluate import EvalPool, EvalResult
from kernelrl.train.suite_family import SuiteFamily
from kernelrl.train.task_family import TinyFamily, TinyProtocol
from tests.agent import helpers as H
from tests.agent.helpers import example_task, fenced, relu_task
from tests.evaluate import candidates as C


def test_bench_and_trainer_read_an_episode_the_same_way(pool: EvalPool) -> None:
    task = relu_task()
    response = fenced(H.BAD_CALL, after="That should work.")
    traj = run_episode(task, ScriptedPolicy([response]), pool, EpisodeConfig(max_turns=1))
    turn = traj.turns[0]
    assert turn.status == "runtime_error"
    family = SuiteFamily([task, example_task()], n_heldout=1, seed=0)  # the trainer's side, same defaults
    assert family.messages(task.id) == turn.messages[:2]  # the opening prompt
    candidate = family.candidate(task.id, response)
    assert candidate is not None and candidate.source == turn.code
    assert family.protocol.feedback(turn.result) == turn.feedback
    assert "takes 4 arguments" in turn.feedback


def test_plain_text_tool_call_runs_in_the_gym(pool: EvalPool) -> None:
    protocol, task = AgentProtocol(), relu_task()
    draft = fenced(C.GOOD) + protocol.tool_text("compile")
    assert protocol.tool_call(draft) == "compile" and protocol.tool_call(fenced(C.GOOD)) is None
    output, result = protocol.run_tool(ToolExecutor(pool, task, "cpu"), "compile", draft)
    assert result is not None and output.startswith(protocol.output_open)
    assert json.loads(output.strip()[len("<tool_output>"):-len("</tool_output>")]) == {"compiled": True}
    # after the output the call is answered; the final answer is the block written after it
    turn = draft + output + fenced(H.BAD_CALL)
    assert protocol.tool_call(turn) is None
    assert protocol.extract(turn) == protocol.extract(fenced(H.BAD_CALL)) != protocol.extract(fenced(C.GOOD))


def test_tiny_family_speaks_through_its_protocol() -> None:
    family = TinyFamily([("relu", "neg")], [])
    assert isinstance(family.protocol, TinyProtocol)
    p = family.protocol
    turn = f" v = -v;{p.tool_text('compile')}{p.output_open}ok{p.output_close} v = v * 2.0f;"
    assert p.tool_call(turn[: turn.index(p.output_open)]) == "compile" and p.tool_call(turn) is None
    assert p.answer(turn).strip() == "v = v * 2.0f;"
    candidate = family.candidate(("relu", "neg"), turn)
    assert candidate is not None and "v = v * 2.0f;" in candidate.source and "v = -v;" not in candidate.source
    result = EvalResult.from_dict({"status": "incorrect", "task_id": "t", "backend": "cpu"})
    assert p.feedback(result) == "\nresult: incorrect\nfix:"
