"""Code extraction, task specs and the reward of an EvalResult (no service needed)."""

from __future__ import annotations

import json
import math

import pytest

from kernelrl.agent.extract import extract_code
from kernelrl.evaluate import EvalResult, Status, Timing
from kernelrl.integrations.scoring import reward_from_result, reward_settings, task_spec
from kernelrl.tasks import Task
from tests.serve.helpers import CHEAP, TASK


def test_extract_code_prefers_the_last_block_defining_model_new() -> None:
    text = f"Plan first.\n```python\nprint('scratch')\n```\nFinal:\n```python\n{CHEAP}```\nDone."
    assert extract_code(text).strip() == CHEAP.strip()
    assert extract_code("```\nx = 1\n```").strip() == "x = 1"
    assert extract_code(CHEAP).strip() == CHEAP.strip()
    assert extract_code("I cannot write this kernel.") is None
    assert extract_code("") is None


def test_reward_is_the_registry_reward_chosen_by_name() -> None:
    def result(status: Status, speedup: float | None = None, meaningful: bool = True) -> EvalResult:
        timing = Timing(speedup=speedup, meaningful=meaningful) if speedup is not None else None
        return EvalResult(status=status, task_id="t", backend="cpu", timing=timing)

    # the default is `speedup`: max(0.1, 1 + min(3, log2 s)) when correct, else 0
    assert reward_from_result(result(Status.INCORRECT, 5.0)) == 0.0
    assert reward_from_result(result(Status.COMPILE_ERROR)) == 0.0
    assert reward_from_result(result(Status.OK)) == 1.0
    assert reward_from_result(result(Status.OK, 0.5)) == pytest.approx(0.1)
    assert reward_from_result(result(Status.OK, 1.5)) == pytest.approx(1.0 + math.log2(1.5))
    assert reward_from_result(result(Status.OK, 9.0)) == 4.0
    assert reward_from_result(result(Status.OK, 9.0), options={"cap": 1.0}) == 2.0
    assert reward_from_result(result(Status.OK, 9.0, meaningful=False)) == 1.0
    assert reward_from_result(EvalResult.from_dict(result(Status.OK, 9.0).to_dict())) == 4.0  # decoded from the wire
    assert reward_from_result(result(Status.OK, 9.0), "weighted") == 1.0
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        reward_from_result(result(Status.OK), "nope")


def test_reward_settings_check_the_name_and_refuse_the_retired_max_bonus() -> None:
    assert reward_settings({}) == ("speedup", {})
    assert reward_settings({"reward": "coverage", "reward_options": {"cap": 2.0}, "client": None}) == (
        "coverage", {"cap": 2.0})
    with pytest.raises(KeyError, match="unknown reward"):
        reward_settings({"reward": "nope"})
    with pytest.raises(ValueError, match="max_bonus"):
        reward_settings({"max_bonus": 3.0})


def test_task_spec_accepts_ids_dicts_json_and_source() -> None:
    assert task_spec("relu") == "relu"
    assert task_spec(TASK) == TASK
    assert task_spec(json.dumps(TASK)) == TASK
    inline = task_spec(TASK["source"], {"task_id": "mine"})
    assert isinstance(inline, Task) and inline.id == "mine"
    assert task_spec("ignored", {"task": TASK}) == TASK
    assert task_spec("gt-id", {"task_id": "from-extra"}) == "from-extra"
