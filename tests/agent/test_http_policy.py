"""The OpenAI-compatible policy against a real chat server on 127.0.0.1 (real `openai` client, real HTTP)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kernelrl.agent import (
    EpisodeConfig,
    OpenAIChatPolicy,
    PolicyError,
    RequestContext,
    default_reward,
    run_episode,
)
from kernelrl.evaluate import EvalPool
from tests.agent import helpers as H
from tests.agent.chat_server import ChatServer
from tests.agent.helpers import fenced, relu_task
from tests.evaluate import candidates as C


def by_turn(answers: list[dict[str, Any]]):
    """Reply with answers[i] where i counts assistant messages already in the conversation."""

    def reply(request: dict[str, Any]) -> dict[str, Any]:
        done = sum(m["role"] == "assistant" for m in request["messages"])
        return answers[min(done, len(answers) - 1)]

    return reply


def test_broken_then_fixed_after_feedback(pool: EvalPool) -> None:
    answers = [{"content": fenced(C.C_COMPILE_ERROR)}, {"content": fenced(C.GOOD, "Fixed the undeclared name.")}]
    with ChatServer(by_turn(answers)) as server:
        policy = OpenAIChatPolicy(model="scripted-model", base_url=server.base_url, api_key="k", max_retries=0)
        traj = run_episode(relu_task(), policy, pool, EpisodeConfig(max_turns=3, target_speedup=0.01))
    assert [t.status for t in traj.turns] == ["compile_error", "ok"]
    assert traj.stop_reason == "target_reached" and traj.best_turn is traj.turns[1]
    second = server.requests[1]["messages"]
    assert second[-2]["role"] == "assistant" and "undefined_symbol" in second[-2]["content"]
    feedback = second[-1]
    assert feedback["role"] == "user" and "compile_error" in feedback["content"] and "undefined_symbol" in feedback["content"]
    assert server.requests[0]["model"] == "scripted-model" and server.requests[1]["seed"] == 1
    first_usage = traj.turns[0].usage
    prompt_chars = sum(len(m["content"]) for m in server.requests[0]["messages"])
    assert first_usage.prompt_tokens == prompt_chars // 4 + 7 and first_usage.calls == 1
    assert traj.usage.calls == 2 and traj.turns[0].reward == 0.0
    assert traj.turns[1].reward == default_reward(traj.turns[1].result)  # correct: the registry's speedup reward


def test_history_last_keeps_only_the_opening_and_the_last_exchange(pool: EvalPool) -> None:
    answers = [{"content": fenced(H.WRONG_KERNEL)}, {"content": fenced(H.BAD_CALL)}, {"content": fenced(H.SHORT_OUTPUT)}]
    counter = iter(range(10))  # a truncated history hides the turn number: answer by request number
    with ChatServer(lambda req: answers[min(next(counter), 2)]) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_retries=0)
        traj = run_episode(relu_task(), policy, pool, EpisodeConfig(max_turns=3, history="last"))
    assert [t.status for t in traj.turns] == ["incorrect", "runtime_error", "incorrect"]
    assert traj.stop_reason == "max_turns"
    third = server.requests[2]["messages"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user"]
    assert "takes 4 arguments" in third[-1]["content"] and "elements differ" not in third[-1]["content"]


def test_retries_with_backoff_after_server_errors() -> None:
    calls = iter(range(100))
    with ChatServer(lambda req: {"status": 503} if next(calls) < 2 else {"content": "fine"}) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_retries=3, backoff_s=0.01)
        completion = policy.complete([{"role": "user", "content": "hi"}])
    assert completion.text == "fine" and completion.retries == 2 and len(server.requests) == 3


def test_gives_up_after_max_retries_and_on_client_errors() -> None:
    with ChatServer(lambda req: {"status": 500}) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_retries=1, backoff_s=0.01)
        with pytest.raises(PolicyError, match="2 attempt"):
            policy.complete([{"role": "user", "content": "hi"}])
        assert len(server.requests) == 2
    with ChatServer(lambda req: {"status": 400}) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_retries=3, backoff_s=0.01)
        with pytest.raises(PolicyError):
            policy.complete([{"role": "user", "content": "hi"}])
        assert len(server.requests) == 1  # a bad request is not retried


def test_timeout_is_enforced() -> None:
    with ChatServer(lambda req: {"sleep": 2.0, "content": "late"}) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_retries=0, timeout_s=0.3)
        start = time.monotonic()
        with pytest.raises(PolicyError):
            policy.complete([{"role": "user", "content": "hi"}])
    assert time.monotonic() - start < 1.8


def test_concurrency_limit_holds_at_the_server() -> None:
    with ChatServer(lambda req: {"sleep": 0.15, "content": "ok"}) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_concurrency=2, max_retries=0)
        threads = [threading.Thread(target=policy.complete, args=([{"role": "user", "content": str(i)}],)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(server.requests) == 6 and server.peak_active == 2 and policy.peak_in_flight == 2


def test_tool_calling_episode_runs_tools_against_the_pool(pool: EvalPool) -> None:
    script = [
        {"content": None, "tool_calls": [{"name": "compile", "arguments": {"code": C.C_COMPILE_ERROR}}]},
        {"content": "", "tool_calls": [{"name": "verify", "arguments": {"code": H.WRONG_KERNEL}},
                                       {"name": "profile", "arguments": {"code": C.GOOD}}]},
        {"content": fenced(C.GOOD, "Verified and profiled; final answer:")},
    ]
    with ChatServer(lambda req: script[min(sum(m["role"] == "assistant" for m in req["messages"]), 2)]) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_retries=0)
        traj = run_episode(relu_task(), policy, pool, EpisodeConfig(max_turns=1, tools=True))
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["compile", "verify", "profile"]
    assert "`verify`" in server.requests[0]["messages"][1]["content"]
    tool_messages = [m for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 3
    assert '"compiled":false' in tool_messages[0]["content"] and "undefined_symbol" in tool_messages[0]["content"]
    assert '"status":"incorrect"' in tool_messages[1]["content"] and "timing" not in tool_messages[1]["content"]
    assert '"status":"ok"' in tool_messages[2]["content"] and '"speedup"' in tool_messages[2]["content"]
    turn = traj.turns[0]
    assert turn.tool_calls == 3 and turn.status == "ok" and turn.usage.calls == 3
    assert turn.messages[-1]["role"] == "assistant" and traj.to_dict()["turns"][0]["tool_calls"] == 3


def test_policy_error_ends_the_episode_cleanly(pool: EvalPool) -> None:
    with ChatServer(lambda req: {"status": 500}) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_retries=0)
        traj = run_episode(relu_task(), policy, pool, EpisodeConfig(max_turns=2))
    assert traj.stop_reason == "policy_error" and traj.turns == [] and "500" in traj.error
    assert RequestContext().seed is None


def test_tool_call_limit_then_a_final_request_without_tools(pool: EvalPool) -> None:
    def reply(request: dict[str, Any]) -> dict[str, Any]:
        if "tools" not in request:
            return {"content": fenced(C.GOOD)}
        return {"content": "", "tool_calls": [{"name": "compile", "arguments": {"code": C.GOOD}},
                                              {"name": "profile", "arguments": {"code": C.GOOD}}]}

    with ChatServer(reply) as server:
        policy = OpenAIChatPolicy(model="m", base_url=server.base_url, max_retries=0)
        traj = run_episode(relu_task(), policy, pool, EpisodeConfig(max_turns=1, tools=True, max_tool_calls=1))
    assert len(server.requests) == 2 and "tools" not in server.requests[1]
    tool_messages = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert '"compiled":true' in tool_messages[0]["content"] and "limit reached" in tool_messages[1]["content"]
    assert traj.turns[0].tool_calls == 1 and traj.turns[0].status == "ok"
