"""Advantage estimators declare what they need beyond (rewards, group_ids, response_mask); the trainer
reads the declaration (`estimator_inputs`) instead of branching on the estimator's name."""

from __future__ import annotations

import inspect

import pytest

import kernelrl.rl  # noqa: F401  (registers every estimator)
from kernelrl.rl.registries import ADVANTAGE_ESTIMATORS, EstimatorInputs, estimator_inputs

#: the keyword inputs each declared flag stands for (what the trainer then passes)
FLAG_INPUTS = {"values": {"values"}, "process_rewards": {"process_rewards"}, "episodes": {"turn_index", "episode_ids"}}
#: on-policy distillation's estimator: token rewards come from a teacher (`kernelrl.train.distill`), not the RL trainer
TEACHER_ONLY = {"opd", "token_reward_direct"}


def test_declarations() -> None:
    assert estimator_inputs("gae") == EstimatorInputs(values=True)
    assert estimator_inputs("prime") == EstimatorInputs(process_rewards=True)
    assert estimator_inputs("trloo") == EstimatorInputs(episodes=True)
    assert estimator_inputs("grpo") == estimator_inputs("dr_grpo") == EstimatorInputs()
    with pytest.raises(KeyError, match="unknown advantage estimator 'nope'"):
        estimator_inputs("nope")


@pytest.mark.parametrize("name", sorted(set(ADVANTAGE_ESTIMATORS.names()) - TEACHER_ONLY))
def test_every_required_input_is_declared(name: str) -> None:
    params = inspect.signature(ADVANTAGE_ESTIMATORS.get(name)).parameters
    required = {p for p, v in list(params.items())[3:] if v.default is inspect.Parameter.empty}
    declared = estimator_inputs(name)
    provided = set().union(*(inputs for flag, inputs in FLAG_INPUTS.items() if getattr(declared, flag)))
    assert required <= provided, f"{name} needs {sorted(required - provided)} but does not declare them"
    for flag, inputs in FLAG_INPUTS.items():
        assert not getattr(declared, flag) or inputs <= set(params), f"{name} declares {flag} but takes no {inputs}"
