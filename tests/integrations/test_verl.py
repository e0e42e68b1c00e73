"""verl bridge: `compute_score` through a real service; estimators and losses in verl's real registries."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernelrl.integrations.verl import adapt_estimator, compute_score, compute_score_batch, register_with_verl
from kernelrl.registry import Registry
from tests.serve.helpers import CHEAP, TASK, WRONG


def fenced(code: str) -> str:
    return f"Here is my kernel:\n```python\n{code}```\n"


def test_compute_score_through_the_service(service) -> None:
    assert compute_score("kernelbench", fenced(CHEAP), "relu") == 1.0
    assert compute_score("kernelbench", fenced(WRONG), "relu") == 0.0
    assert compute_score("kernelbench", "no code here", "relu") == 0.0
    assert compute_score("kernelbench", fenced(CHEAP), TASK["source"], {"task_id": "inline-relu"}) == 1.0
    assert compute_score("kernelbench", fenced(CHEAP), "unused", extra_info={"task": TASK}) == 1.0


def test_compute_score_batch(service) -> None:
    scores = compute_score_batch(["kb"] * 3, [fenced(CHEAP), fenced(WRONG), "nothing"], ["relu"] * 3, [{}, {}, {}])
    assert scores == [1.0, 0.0, 0.0]


def loo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Leave-one-out baseline per group (a test estimator, (B,) -> (B,))."""
    out = torch.zeros_like(rewards)
    for g in group_ids.unique():
        members = group_ids == g
        n = int(members.sum())
        total = rewards[members].sum()
        out[members] = rewards[members] - (total - rewards[members]) / max(n - 1, 1)
    return out


def test_estimator_adapter_follows_verls_convention() -> None:
    fn = adapt_estimator(loo)
    token_rewards = torch.zeros(4, 3)
    token_rewards[:, -1] = torch.tensor([1.0, 0.0, 2.0, 2.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    advantages, returns = fn(token_level_rewards=token_rewards, response_mask=mask, index=np.array(["a", "a", "b", "b"], dtype=object))
    expected = torch.tensor([1.0, -1.0, 0.0, 0.0]).unsqueeze(-1) * mask
    assert torch.allclose(advantages, expected) and torch.equal(advantages, returns)
    with pytest.raises(TypeError, match="needs inputs verl does not provide: temperature"):
        adapt_estimator(lambda rewards, temperature: rewards)


def test_registration_in_verls_registries() -> None:
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed")
    estimators: Registry = Registry("advantage estimator")
    estimators.register("loo_test")(loo)
    losses: Registry = Registry("policy loss")

    @losses.register("pg_test")
    def pg(log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor):
        return -(log_probs * advantages * mask).sum() / mask.sum(), {"tokens": mask.sum()}

    report = register_with_verl(estimators, losses)
    assert report == {"kernelrl_loo_test": "registered", "kernelrl_pg_test": "registered"}
    assert register_with_verl(estimators, losses) == report  # idempotent
    adv_fn = core_algos.get_adv_estimator_fn("kernelrl_loo_test")
    advantages, _ = adv_fn(token_level_rewards=torch.tensor([[0.0, 1.0], [0.0, 3.0]]), response_mask=torch.ones(2, 2),
                           index=np.array(["u", "u"], dtype=object), config=None)
    assert torch.allclose(advantages, torch.tensor([[-2.0, -2.0], [2.0, 2.0]]))
    loss_fn = core_algos.get_policy_loss_fn("kernelrl_pg_test")
    loss, metrics = loss_fn(old_log_prob=torch.zeros(1, 2), log_prob=torch.full((1, 2), -1.0), advantages=torch.ones(1, 2),
                            response_mask=torch.ones(1, 2), loss_agg_mode="token-mean", config=None, rollout_log_probs=None)
    assert loss.item() == pytest.approx(1.0) and metrics == {"tokens": 2.0}


def test_registration_without_kernelrl_rl_says_why() -> None:
    pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed")
    try:
        import kernelrl.rl  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"kernelrl\.rl is not available"):
            register_with_verl()
    else:
        assert all(v == "registered" or v.startswith("skipped") for v in register_with_verl().values())
