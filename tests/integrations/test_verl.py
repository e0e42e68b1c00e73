"""verl bridge: `compute_score` through a real service; estimators and losses in verl's real registries.

The estimator tests call the registered functions with exactly the keyword arguments verl 0.9.1's
`ray_trainer.compute_advantage` passes (`token_level_rewards`, `response_mask`, `config`, `index`), and
TRLOO also through that function itself on a `DataProto`; expected values are worked by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernelrl.integrations.verl import (
    adapt_estimator,
    compute_advantage_from_batch,
    compute_score,
    compute_score_batch,
    register_with_verl,
    response_turns,
    teacher_log_prob_delta,
)
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
    assert loss.item() == pytest.approx(1.0) and metrics == {"actor/tokens": 2.0}


@pytest.fixture(scope="module")
def core_algos():
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed")
    register_with_verl()
    return core_algos


def test_every_kernelrl_estimator_and_loss_is_registered(core_algos) -> None:
    from kernelrl.rl import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

    report = register_with_verl()
    assert set(report) == {f"kernelrl_{n}" for n in [*ADVANTAGE_ESTIMATORS, *POLICY_LOSSES]}
    # top-K Direct-OPD needs the policy's log-probs of K candidate tokens per position; verl's actor hands
    # a policy loss the sampled tokens' log-probs only
    assert report.pop("kernelrl_opd_topk") == ("skipped: opd_topk_clipped_loss needs inputs verl does not provide: "
                                               "log_prob_topk, old_log_prob_topk, deltas")
    # GAE needs the critic's values; verl hands registered estimators none (its own GAE reads them itself)
    assert report.pop("kernelrl_gae") == "skipped: gae_estimator needs inputs verl does not provide: values"
    assert set(report.values()) == {"registered"}
    for name in ("trloo", "prime", "opd", "token_reward_direct"):
        assert core_algos.get_adv_estimator_fn(f"kernelrl_{name}") is not None


def test_generic_estimators_take_verls_gamma(core_algos) -> None:
    from verl.trainer.config import AlgoConfig

    from kernelrl.rl import reinforce_pp_advantages

    rewards, mask = outcome_on_last_token(OUTCOME, PRIME_MASK), PRIME_MASK
    advantages, _ = core_algos.get_adv_estimator_fn("kernelrl_reinforce++")(
        **verl_kwargs(rewards, mask, "aabb", AlgoConfig(gamma=0.5)))
    assert torch.allclose(advantages, reinforce_pp_advantages(OUTCOME, None, mask, gamma=0.5))


def verl_kwargs(rewards: torch.Tensor, mask: torch.Tensor, uids: str, config) -> dict:
    """What verl's `compute_advantage` passes a registered estimator."""
    return {"token_level_rewards": rewards, "response_mask": mask, "config": config,
            "index": np.array(list(uids), dtype=object)}


# Multi-turn responses: runs of 1s in the mask are model turns, 0s inside are tool output.
TURN_MASK = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 0],
                          [1, 1, 1, 0, 0, 1, 0, 0],
                          [0, 1, 1, 1, 1, 0, 0, 0],
                          [1, 1, 0, 1, 0, 1, 1, 0]])


def turn_rewards() -> torch.Tensor:
    r = torch.zeros(4, 8)
    r[0, 1], r[0, 5] = 0.5, 1.0  # on each turn's last token
    r[1, 6] = 2.0  # the agent loop's final reward on a trailing tool token: counts for the last turn
    r[2, 4] = 3.0
    r[3, 1] = r[3, 3] = r[3, 6] = 1.0
    return r


# gamma = 0.5. Returns G: row0 (1, 1), row1 (1, 2), row2 (3,), row3 (1.75, 1.5, 1). Groups (uid, turn):
# (a,0) {1, 1} -> 0, 0; (a,1) {1, 2} -> -1, 1; (b,0) {3, 1.75} -> 1.25, -1.25; (b,1) and (b,2) alone keep G.
TRLOO_ADVANTAGES = torch.tensor([[0, 0, 0, 0, -1, -1, 0, 0],
                                 [0, 0, 0, 0, 0, 1, 0, 0],
                                 [0, 1.25, 1.25, 1.25, 1.25, 0, 0, 0],
                                 [-1.25, -1.25, 0, 1.5, 0, 1, 1, 0]])
TRLOO_RETURNS = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 0],
                              [1, 1, 1, 0, 0, 2, 0, 0],
                              [0, 3, 3, 3, 3, 0, 0, 0],
                              [1.75, 1.75, 0, 1.5, 0, 1, 1, 0]])


def test_response_turns() -> None:
    row, turn, owner = response_turns(TURN_MASK)
    assert row.tolist() == [0, 0, 1, 1, 2, 3, 3, 3] and turn.tolist() == [0, 1, 0, 1, 0, 0, 1, 2]
    assert owner[3].tolist() == [0, 0, 0, 1, 1, 2, 2, 2] and owner[2].tolist() == [0] * 8


def test_trloo_with_verls_kwargs(core_algos) -> None:
    from verl.trainer.config import AlgoConfig

    fn = core_algos.get_adv_estimator_fn("kernelrl_trloo")
    advantages, returns = fn(**verl_kwargs(turn_rewards(), TURN_MASK, "aabb", AlgoConfig(gamma=0.5)))
    assert torch.allclose(advantages, TRLOO_ADVANTAGES) and torch.allclose(returns, TRLOO_RETURNS)
    empty, _ = fn(**verl_kwargs(torch.ones(2, 3), torch.zeros(2, 3), "ab", None))  # no model turn at all
    assert torch.equal(empty, torch.zeros(2, 3))


def import_ray_trainer():
    """verl's `ray_trainer` module; it imports `cachetools` (verl's `verl-core` extra, in our dev extras)."""
    pytest.importorskip("cachetools", reason="verl's ray_trainer needs cachetools (in kernelrl's dev extras)")
    from verl.trainer.ppo import ray_trainer

    return ray_trainer


def test_trloo_through_verls_compute_advantage(core_algos) -> None:
    from verl import DataProto
    from verl.trainer.config import AlgoConfig

    ray_trainer = import_ray_trainer()
    data = DataProto.from_dict(tensors={"token_level_rewards": turn_rewards(), "response_mask": TURN_MASK},
                               non_tensors={"uid": np.array(list("aabb"), dtype=object)})
    config = AlgoConfig(gamma=0.5, adv_estimator="kernelrl_trloo")
    out = ray_trainer.compute_advantage(data, adv_estimator=config.adv_estimator, gamma=config.gamma, config=config)
    assert torch.allclose(out.batch["advantages"], TRLOO_ADVANTAGES)
    assert torch.allclose(out.batch["returns"], TRLOO_RETURNS)


# PRIME: groups a = rows 0, 1 and b = rows 2, 3; row 1's last token is masked (its 5 must not count).
PRIME_MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
PROCESS = torch.tensor([[1.0, 0, 2], [0, 1, 5], [0, 0, 0], [3, 0, 0]])
OUTCOME = torch.tensor([1.0, 0, 1, 1])
# process scores (token means) 1, .5, 0, 1 -> leave-one-out baselines .5, 1, 1, 0; returns of r - b:
PROCESS_ONLY = torch.tensor([[1.5, 1, 1.5], [-1, 0, 0], [-3, -2, -1], [3, 0, 0]])
# outcome RLOO 1, -1, 0, 0 reaches every valid token:
TWO_SOURCES = torch.tensor([[2.5, 2, 2.5], [-2, -1, 0], [-3, -2, -1], [3, 0, 0]])


def whitened(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    valid = x[mask.bool()]
    return (x - valid.mean()) / torch.sqrt(valid.var(unbiased=False) + 1e-8) * mask


def outcome_on_last_token(outcome: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's reward-manager layout: each sample's score on its last valid token."""
    out = torch.zeros(mask.shape)
    out[torch.arange(mask.shape[0]), mask.sum(-1) - 1] = outcome
    return out


def test_prime_with_verls_kwargs_is_the_process_term(core_algos) -> None:
    from omegaconf import OmegaConf

    fn = core_algos.get_adv_estimator_fn("kernelrl_prime")
    raw = OmegaConf.create({"gamma": 1.0, "kernelrl": {"whiten": False}})  # verl passes algorithm as a DictConfig
    advantages, _ = fn(**verl_kwargs(PROCESS, PRIME_MASK, "aabb", raw))
    assert torch.allclose(advantages, PROCESS_ONLY)
    advantages, returns = fn(**verl_kwargs(PROCESS, PRIME_MASK, "aabb", OmegaConf.create({"gamma": 1.0})))
    assert torch.allclose(advantages, whitened(PROCESS_ONLY, PRIME_MASK), atol=1e-6) and torch.equal(advantages, returns)
    with pytest.raises(ValueError, match="no outcome rewards reached the estimator"):
        fn(**verl_kwargs(PROCESS, PRIME_MASK, "aabb", OmegaConf.create({"kernelrl": {"outcome_coef": 2.0}})))


def test_prime_two_sources_through_compute_advantage_from_batch(core_algos) -> None:
    from omegaconf import OmegaConf
    from verl import DataProto

    raw = OmegaConf.create({"gamma": 1.0, "kernelrl": {"whiten": False}})
    uids = np.array(list("aabb"), dtype=object)
    # outcome where verl's reward manager puts it, process rewards under their own batch key
    data = DataProto.from_dict(tensors={"token_level_rewards": outcome_on_last_token(OUTCOME, PRIME_MASK),
                                        "response_mask": PRIME_MASK, "process_rewards": PROCESS},
                               non_tensors={"uid": uids})
    assert torch.allclose(compute_advantage_from_batch(data, "kernelrl_prime", raw).batch["advantages"], TWO_SOURCES)
    # verl's PRIME recipe layout: implicit rewards in rm_scores, verifier accuracy as a per-sample extra
    recipe = DataProto.from_dict(tensors={"token_level_rewards": torch.zeros(4, 3), "response_mask": PRIME_MASK,
                                          "rm_scores": PROCESS},
                                 non_tensors={"uid": uids, "acc": OUTCOME.numpy().astype(object)})
    out = compute_advantage_from_batch(recipe, "kernelrl_prime", raw,
                                       extras={"process_rewards": "rm_scores", "outcome_rewards": "acc"})
    assert torch.allclose(out.batch["advantages"], TWO_SOURCES)


def test_direct_opd_with_verls_kwargs_and_with_an_outcome(core_algos) -> None:
    from omegaconf import OmegaConf
    from verl import DataProto

    delta = torch.tensor([[0.5, -1.0, 2.0], [1.0, 1.0, 9.0], [0.0, 0.25, 0.0], [-2.0, 0.0, 1.0]])
    for name in ("kernelrl_opd", "kernelrl_token_reward_direct"):
        advantages, _ = core_algos.get_adv_estimator_fn(name)(**verl_kwargs(delta, PRIME_MASK, "aabb", None))
        assert torch.equal(advantages, delta * PRIME_MASK)
    config = OmegaConf.create({"kernelrl": {"token_coef": 2.0, "outcome_coef": 0.5}})
    data = DataProto.from_dict(tensors={"token_level_rewards": delta, "response_mask": PRIME_MASK,
                                        "outcome_rewards": OUTCOME}, non_tensors={"uid": np.array(list("aabb"), dtype=object)})
    advantages = compute_advantage_from_batch(data, "kernelrl_opd", config).batch["advantages"]
    # GRPO on the outcome: group a {1, 0}: mean .5, std sqrt(.5) -> +-0.7071; group b agrees -> 0
    grpo = torch.tensor([0.5, -0.5, 0.0, 0.0]) / (0.5 ** 0.5 + 1e-6)
    assert torch.allclose(advantages, (2.0 * delta + 0.5 * grpo.unsqueeze(-1)) * PRIME_MASK, atol=1e-6)


def test_teacher_log_prob_delta_on_a_padded_verl_batch() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=32)
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(LlamaForCausalLM(config).eval())
    # verl layout: left-padded prompt (4) then right-padded response (3); pad id 0
    prompts = torch.tensor([[0, 0, 5, 6], [1, 2, 3, 4]])
    responses = torch.tensor([[7, 8, 0], [9, 10, 11]])
    input_ids = torch.cat([prompts, responses], dim=-1)
    attention_mask = (torch.tensor([[0, 0, 1, 1, 1, 1, 0], [1] * 7]))
    delta = teacher_log_prob_delta(models[0], models[1], input_ids, attention_mask, responses, micro_batch_size=1)

    def unpadded(model, prompt: list[int], response: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + response])).logits[0].log_softmax(-1)
        return logits[len(prompt) - 1:-1].gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)

    for row, (prompt, response) in enumerate([([5, 6], [7, 8]), ([1, 2, 3, 4], [9, 10, 11])]):
        expected = unpadded(models[0], prompt, response) - unpadded(models[1], prompt, response)
        assert torch.allclose(delta[row, :len(response)], expected, atol=1e-5)
    assert delta[0, 2] == 0 and delta.abs().sum() > 0


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_kernelrl_ppo_matches_verls_vanilla_loss(core_algos, mode: str) -> None:
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio_low=0.2,
                         clip_ratio_high=0.28)
    torch.manual_seed(0)
    old = torch.randn(3, 5) * 0.1
    args = {"old_log_prob": old, "log_prob": old + torch.randn(3, 5) * 0.5, "advantages": torch.randn(3, 5),
            "response_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]).bool(),
            "loss_agg_mode": mode, "config": config, "rollout_is_weights": torch.rand(3, 5)}
    # one micro-batch of a data-parallel global batch, as verl's actor sets it
    for info in ({}, {"dp_size": 2, "batch_num_tokens": 20, "global_batch_size": 6, "loss_scale_factor": 7}):
        config.global_batch_info.clear()
        config.global_batch_info.update(info)
        ours, metrics = core_algos.get_policy_loss_fn("kernelrl_ppo")(**args)
        theirs, _ = core_algos.get_policy_loss_fn("vanilla")(**args)
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert set(metrics) >= {"actor/clip_frac", "actor/approx_kl"}


def test_plugin_module_registers_on_import(core_algos) -> None:
    import importlib

    plugin = importlib.import_module("kernelrl.integrations.verl_plugin")
    assert register_with_verl() == plugin.REPORT and plugin.REPORT["kernelrl_trloo"] == "registered"
