"""One episode loop (issue 29): bench's `run_episode` and the trainer's rollout run the same loop, so a
multi-turn tool episode gives the same turns through both, and "no code" is one value (None) end to end."""

from __future__ import annotations

from typing import Any

import pytest

from kernelrl.agent import EpisodeConfig, ScriptedPolicy, episode_loop, run_episode
from kernelrl.agent.episode import default_reward
from kernelrl.agent.episode_protocol import AgentProtocol
from kernelrl.evaluate import EvalPool
from kernelrl.integrations.verl_reward import compute_score
from kernelrl.tasks.task import Task
from kernelrl.train.config import load_config
from kernelrl.train.model import build_model
from kernelrl.train.rollout import EvalCache, Sample
from kernelrl.train.sft import sft_train
from kernelrl.train.suite_family import SuiteFamily, load_suite
from kernelrl.train.task_family import TinyFamily, TinyProtocol, make_family
from kernelrl.train.trainer import RLTrainer

TOOLS = ["task.tool_fraction=0.5", "model.vocab_size=384", "sft.steps=30", "sft.lr=0.01", "rl.tools=true",
         "rl.max_new_tokens=48", "rl.prompts_per_step=2", "rl.group_size=4", "rl.turns=3"]


class MessageTiny(TinyProtocol):
    """The tiny protocol with a message-level opening, so bench's loop can replay the tiny model."""

    def opening(self, task: Task) -> list[dict[str, Any]]:
        return [{"role": "user", "content": task.id}]


def _split(p: TinyProtocol, text: str) -> tuple[list[tuple[str, str, str]], str]:
    """A turn's text as (draft, tool name, tool output) per answered call, then the text after the last
    tool output."""
    calls, rest = [], text
    while (m := p._tag().search(rest)) is not None and rest[m.end():].startswith(p.output_open):
        end = rest.index(p.output_close, m.end())
        calls.append((rest[: m.start()], m.group(1), rest[m.end() + len(p.output_open):end]))
        rest = rest[end + len(p.output_close):]
    return calls, rest


def _script(p: TinyProtocol, turns: list[Sample]) -> list[dict[str, Any]]:
    """The trainer's turns as a message-level policy's answers: each answered plain-text call becomes an
    OpenAI-style call on the draft's candidate, the rest is the turn's final answer."""
    answers: list[dict[str, Any]] = []
    for s in turns:
        calls, rest = _split(p, s.text)
        for draft, name, _ in calls:
            answers.append({"content": draft, "tool_calls": [{"name": name, "arguments": {"code": p.extract(draft)}}]})
        answers.append({"content": rest})
    return answers


@pytest.fixture(scope="module")
def trained(pool: EvalPool) -> tuple[Any, ...]:
    cfg = load_config("smoke", overrides=TOOLS)
    family = make_family(cfg.task, cfg.seed)
    assert isinstance(family, TinyFamily)
    model, tok = build_model(cfg.model, family.tokenizer_corpus(), cfg.seed)
    sft_train(model, family.sft_pairs(tok, family.train_items, cfg.seed), steps=cfg.sft.steps,
              batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, seed=cfg.seed, pad_id=tok.pad_token_id)
    return cfg, family, model, tok


def test_bench_and_trainer_give_the_same_turns(trained: tuple[Any, ...], pool: EvalPool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, family, model, tok = trained
    runs: list[str] = []
    real = episode_loop.run_episodes

    def recording(driver: Any, *args: Any, **kwargs: Any) -> Any:  # calls through: only records who ran it
        runs.append(type(driver).__name__)
        return real(driver, *args, **kwargs)

    for module in ("kernelrl.agent.episode", "kernelrl.train.rollout"):
        monkeypatch.setattr(f"{module}.run_episodes", recording)
    tr = RLTrainer(cfg.rl, model, tok, EvalCache(pool, family), family.train_items, seed=cfg.seed,
                   max_context=cfg.model.max_positions)
    samples = tr.rollout.collect()
    episodes: dict[int, list[Sample]] = {}
    for s in samples:
        episodes.setdefault(s.episode, []).append(s)
    assert any(s.tool_calls for s in samples), "no episode called a tool"
    assert any(len(turns) > 1 for turns in episodes.values()), "no episode went past its first turn"
    protocol = MessageTiny(hybrid=family.hybrid)
    config = EpisodeConfig(max_turns=cfg.rl.turns, tools=True, max_tool_calls=cfg.rl.max_tool_calls,
                           target_speedup=0.0)  # stop at the first correct turn, as the trainer does
    for turns in episodes.values():
        task = family.task(turns[0].item)
        traj = run_episode(task, ScriptedPolicy(_script(protocol, turns)), pool, config, protocol=protocol)
        assert len(traj.turns) == len(turns), (traj.stop_reason, [s.text for s in turns])
        earlier = 0  # a turn's messages hold the earlier turns' too: its own tool answers come after theirs
        for bench_turn, s in zip(traj.turns, turns, strict=True):
            assert bench_turn.code == protocol.extract(s.text)
            assert bench_turn.tool_calls == s.tool_calls
            assert bench_turn.status == (str(s.result.status) if s.result is not None else "no_code")
            every_answer = [m["content"] for m in bench_turn.messages if m["role"] == "tool"]
            tool_answers, earlier = every_answer[earlier:], len(every_answer)
            outputs = [out for _, _, out in _split(protocol, s.text)[0]]
            for answer, out in zip(tool_answers, outputs, strict=True):  # the same tool verdicts
                assert ('"compiled":true' in answer) == (out.strip() == "ok"), (answer, out)
    assert runs == ["EngineDriver"] + ["PolicyDriver"] * len(episodes)


def test_no_code_is_none_end_to_end(pool: EvalPool) -> None:
    suite = SuiteFamily(load_suite("level1"), n_heldout=2)
    cache = EvalCache(pool, suite)
    item = "level1/01_ReLU"
    before = cache.submitted
    assert cache.submit(item, "I cannot write this kernel.").result() is None  # the trainer's submission: not sent
    assert cache.submitted == before
    assert "could not find any code" in suite.protocol.feedback(None)
    assert TinyProtocol().feedback(None) == "\nresult: compile_error\nfix:"  # what the tiny model was always told
    traj = run_episode(suite.task(item), ScriptedPolicy(["I cannot write this kernel."]), pool, EpisodeConfig())
    turn = traj.turns[0]  # bench: the same None
    assert turn.result is None and turn.code is None and turn.status == "no_code" and turn.reward == 0.0
    assert default_reward(None) == 0.0 and "could not find any code" in AgentProtocol().feedback(None)
    assert episode_loop.judge_answer(AgentProtocol(), "no code here", lambda code: pytest.fail("sent")) is None
    assert compute_score("kernelrl", "no code here", "level1/01_ReLU", client=object()) == 0.0  # the bridges
