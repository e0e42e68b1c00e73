"""PRS is a loss mask applied after advantages (issue 16): a rejected turn keeps its reward in its
episode's earlier returns and in the (prompt, turn) baselines of TRLOO, and adds no gradient.
Also: list mismatch corrections and the dual-clip constant reach the policy loss.

Hand-made samples on a tiny untrained model; no gym, no rollout."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import kernelrl.train.trainer as trainer_mod
from kernelrl.evaluate.result import EvalResult, Status
from kernelrl.rl import ppo_clip_loss
from kernelrl.train.config import TrainConfig
from kernelrl.train.elementwise_chains import tokenizer_corpus
from kernelrl.train.logprobs import pad_responses, response_logprobs
from kernelrl.train.model import build_model
from kernelrl.train.rollout import EvalCache, Sample
from kernelrl.train.task_family import TinyFamily
from kernelrl.train.trainer import RLTrainer


def verdict(correct: bool, coverage: float = 1.0) -> EvalResult:
    return EvalResult(status=Status.OK if correct else Status.INCORRECT, task_id="t", backend="cpu",
                      kernel_calls={"k": 1}, environment={"coverage": coverage})


def sample(episode: int, turn: int, reward: float, result: EvalResult, response: list[int],
           group: int = 0) -> Sample:
    return Sample(group=group, episode=episode, turn=turn, item="chain", prompt_ids=[3, 17, 42, 9 + turn],
                  response_ids=response, rollout_logprobs=[-1.0] * len(response), versions=[0] * len(response),
                  text="", finish_reason="stop", result=result, reward=reward,
                  request_id=f"{group}/{episode}#{turn}")


def trainer(smoke_cfg: TrainConfig, **rl: Any) -> RLTrainer:
    torch.manual_seed(0)
    model, tok = build_model(smoke_cfg.model, tokenizer_corpus(), 0)
    cfg = smoke_cfg.rl.model_copy(update={"algo": "trloo", "turns": 2, "dynamic_sampling": False, "gamma": 1.0,
                                          "micro_batch_size": 2, "max_grad_norm": 1e9, "loss_agg": "token-mean",
                                          **rl})
    cache = EvalCache(None, TinyFamily([], []))  # type: ignore[arg-type]  # never evaluates anything
    return RLTrainer(cfg, model, tok, cache, [], seed=0, max_context=smoke_cfg.model.max_positions)


# One prompt, three episodes (gamma = 1):
#   e0: turn 0 incorrect r=0, turn 1 correct with coverage 0.2 r=3  -> PRS rejects e0's turn 1 (p = 0)
#   e1: turn 0 incorrect r=0, turn 1 incorrect r=0.5
#   e2: turn 0 correct with coverage 1.0 r=2 (solved, no turn 1)
# Returns with every turn present: e0 (3, 3), e1 (0.5, 0.5), e2 (2).
# TRLOO, turn 0: e0 3 - (0.5 + 2)/2 = 1.75, e1 0.5 - (3 + 2)/2 = -2.0, e2 2 - (3 + 0.5)/2 = 0.25;
#        turn 1: e0 3 - 0.5 = 2.5 (masked out of the loss), e1 0.5 - 3 = -2.5.
# Deleting e0's turn 1 first (the old behaviour) gives e0/e1/e2 turn 0: -1.25, -0.5, 1.75 and e1 turn 1: 0.5.
def episodes() -> list[Sample]:
    return [
        sample(0, 0, 0.0, verdict(False), [11, 12, 13]),
        sample(0, 1, 3.0, verdict(True, 0.2), [21, 22, 23, 24, 25]),
        sample(1, 0, 0.0, verdict(False), [31, 32]),
        sample(1, 1, 0.5, verdict(False), [41, 42, 43, 44]),
        sample(2, 0, 2.0, verdict(True, 1.0), [51, 52, 53]),
    ]


EXPECTED_ADV = [1.75, 2.5, -2.0, -2.5, 0.25]
EXPECTED_LOSS_ROWS = [True, False, True, True, True]


@pytest.mark.parametrize("mode", ["per_turn", "geometric"])
def test_prs_rejection_is_a_loss_mask_after_advantages(smoke_cfg: TrainConfig, mode: str) -> None:
    tr = trainer(smoke_cfg, prs=mode)
    batch = tr.advantages_and_mask(episodes())
    assert batch.loss_rows.tolist() == EXPECTED_LOSS_ROWS  # geometric keeps e0's incorrect turn 0 too
    for row, want in enumerate(EXPECTED_ADV):
        valid = batch.mask[row]
        assert torch.allclose(batch.advantages[row][valid], torch.full((int(valid.sum()),), want))
    assert batch.metrics["kept_fraction"] == pytest.approx(4 / 5)
    assert batch.metrics["prs/rejected_fraction"] == pytest.approx(1 / 5)


def test_prs_rejected_turn_adds_no_gradient(smoke_cfg: TrainConfig) -> None:
    """One real update: its gradient is the token-mean policy gradient of the kept rows with the
    hand-computed advantages above; the rejected row contributes nothing."""
    tr = trainer(smoke_cfg, prs="per_turn")
    samples = episodes()
    kept = [s for s, k in zip(samples, EXPECTED_LOSS_ROWS, strict=True) if k]
    adv_kept = [a for a, k in zip(EXPECTED_ADV, EXPECTED_LOSS_ROWS, strict=True) if k]
    # expected gradient, from the weights before the update (one on-policy epoch: ratio 1)
    lp, _, mask = response_logprobs(tr.model, [s.prompt_ids for s in kept], [s.response_ids for s in kept],
                                    pad_id=tr.pad)
    adv = torch.tensor(adv_kept).unsqueeze(-1).expand_as(lp) * mask
    tr.model.zero_grad(set_to_none=True)
    ppo_clip_loss(lp, lp.detach(), adv, mask, agg="token-mean").loss.backward()
    params = [p for p in tr.model.parameters() if p.requires_grad]
    want = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    tr.model.zero_grad(set_to_none=True)

    metrics = tr.update(samples)
    got = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    assert any(float(w.abs().max()) > 0 for w in want)
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, rtol=1e-4, atol=1e-7)
    _, all_mask = pad_responses([s.response_ids for s in kept])
    abs_mean = sum(abs(a) * len(s.response_ids) for a, s in zip(adv_kept, kept, strict=True)) / int(all_mask.sum())
    assert metrics["adv_abs_mean"] == pytest.approx(abs_mean)
    assert metrics["kept_fraction"] == pytest.approx(4 / 5)


def test_all_rejected_skips_the_update(smoke_cfg: TrainConfig) -> None:
    tr = trainer(smoke_cfg, prs="per_turn", algo="grpo", turns=1)
    lazy = [sample(e, 0, 1.0 + e, verdict(True, 0.1), [7, 8]) for e in range(2)]
    before = [p.detach().clone() for p in tr.model.parameters()]
    m = tr.update(lazy)
    assert m["kept_fraction"] == 0.0 and "loss" not in m
    assert all(torch.equal(a, b) for a, b in zip(before, tr.model.parameters(), strict=True))


def test_mismatch_list_and_dual_clip_reach_the_loss(smoke_cfg: TrainConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return ppo_clip_loss(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "ppo_clip_loss", spy)
    tr = trainer(smoke_cfg, algo="grpo", turns=1, dual_clip=3.0,
                 mismatch=["token_veto", {"name": "geo_rs", "lower": 0.0, "upper": 1e9}],
                 mismatch_options={"token_veto": {"threshold": 1e-30}})
    assert tr.mismatch_specs == [("token_veto", {"threshold": 1e-30}), ("geo_rs", {"lower": 0.0, "upper": 1e9})]
    m = tr.update([sample(e, 0, float(e), verdict(True), [5, 6, 7]) for e in range(2)])
    assert seen and all(kw["dual_clip"] == 3.0 for kw in seen)
    assert "is/token_veto/masked_seq_frac" in m and "is/geo_rs/geo_mean" in m
    assert m["is/token_veto/masked_seq_frac"] == 0.0 and m["is/geo_rs/masked_seq_frac"] == 0.0


def test_unknown_mismatch_name_fails_at_construction(smoke_cfg: TrainConfig) -> None:
    with pytest.raises(KeyError):
        trainer(smoke_cfg, algo="grpo", turns=1, mismatch=["geo_rs", "no_such_correction"])
