"""One reward path: bench episodes, `kernelrl train` and the verl/TRL bridges score a result alike."""

from __future__ import annotations

import inspect
import math

import pytest

from kernelrl.agent.episode import default_reward, run_episode
from kernelrl.evaluate.result import Correctness, EvalResult, Status, Timing
from kernelrl.integrations.scoring import reward_from_result, reward_settings
from kernelrl.rewards import DEFAULT_REWARD, REWARDS, get_reward
from kernelrl.train.config import TrainConfig


def result(status: Status, speedup: float | None = None) -> EvalResult:
    timing = None if speedup is None else Timing(candidate_ms=1.0, reference_ms=speedup, speedup=speedup, trials=5)
    ran = status in (Status.OK, Status.INCORRECT)
    correctness = Correctness(trials=3, passed=3 if status == Status.OK else 1, rtol=1e-4, atol=1e-5) if ran else None
    return EvalResult(status=status, task_id="t", backend="cpu", timing=timing, correctness=correctness,
                      kernel_calls={"k": 3} if ran else {}, error="" if ran else "boom")


CASES = {
    "ok fast": (result(Status.OK, 4.0), 3.0),  # 1 + log2 4
    "ok slow": (result(Status.OK, 0.8), 1.0 + math.log2(0.8)),
    "ok, no timing": (result(Status.OK), 1.0),
    "incorrect": (result(Status.INCORRECT, 4.0), 0.0),
    "compile error": (result(Status.COMPILE_ERROR), 0.0),
}


def bench_path(r: EvalResult) -> float:
    """What `run_episode` records for a turn: its default `reward_fn` of the result."""
    reward_fn = inspect.signature(run_episode).parameters["reward_fn"].default
    assert reward_fn is default_reward
    return reward_fn(r)


def train_path(r: EvalResult) -> float:
    """What the RL trainer does with a default config (`Trainer.__init__`: get_reward(rl.reward, **rl.reward_options))."""
    rl = TrainConfig().rl
    return get_reward(rl.reward, **rl.reward_options)(r)


def bridge_path(r: EvalResult) -> float:
    """What verl's `compute_score` / TRL's reward do with no reward settings given."""
    return reward_from_result(r, *reward_settings({}))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_path_gives_the_same_reward(case: str) -> None:
    r, expected = CASES[case]
    got = {"bench": bench_path(r), "train": train_path(r), "bridge": bridge_path(r)}
    assert got == pytest.approx({name: expected for name in got}), got
    assert got["bench"] == REWARDS.get(DEFAULT_REWARD)(r)


def test_one_default_name() -> None:
    assert DEFAULT_REWARD in REWARDS
    assert TrainConfig().rl.reward == DEFAULT_REWARD
    assert reward_settings({})[0] == DEFAULT_REWARD
    assert inspect.signature(default_reward).parameters["name"].default == DEFAULT_REWARD
