"""Tool-using agentic RL (issue 18): with ``rl.tools`` the tiny policy's plain-text tool calls run in the
real gym inside its turns, the tool outputs are context only (masked out of every loss), and it trains."""

from __future__ import annotations

import math

import pytest
import torch

from kernelrl.evaluate import EvalPool
from kernelrl.train.config import TrainConfig, load_config
from kernelrl.train.model import build_model
from kernelrl.train.rollout import EvalCache, Sample
from kernelrl.train.sft import sft_train
from kernelrl.train.task_family import TinyFamily, make_family
from kernelrl.train.trainer import RLTrainer
from tests.train.test_prs_loss_mask import sample, trainer, verdict

TOOLS = ["task.tool_fraction=1.0", "model.vocab_size=384", "sft.steps=30", "sft.lr=0.01", "rl.tools=true",
         "rl.max_new_tokens=48", "rl.prompts_per_step=1", "rl.group_size=4", "rl.reward=compile",
         "rl.lr=0.003"]


def test_rl_with_tools_trains_and_masks_tool_outputs(pool: EvalPool) -> None:
    cfg = load_config("smoke", overrides=TOOLS)
    family = make_family(cfg.task, cfg.seed)
    assert isinstance(family, TinyFamily)
    model, tok = build_model(cfg.model, family.tokenizer_corpus(), cfg.seed)
    sft_train(model, family.sft_pairs(tok, family.train_items, cfg.seed), steps=cfg.sft.steps,
              batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, seed=cfg.seed, pad_id=tok.pad_token_id)
    tr = RLTrainer(cfg.rl, model, tok, EvalCache(pool, family), family.train_items, seed=cfg.seed,
                   max_context=cfg.model.max_positions)
    before = [p.detach().clone() for p in model.parameters()]
    called: list[Sample] = []
    losses = []
    for _ in range(2):
        samples = tr.rollout.collect()
        assert all(s.result is not None for s in samples)
        called += [s for s in samples if s.tool_calls]
        tr.score(samples)
        batch = tr.advantages_and_mask(samples)
        for row, s in enumerate(batch.samples):  # the loss mask is exactly the policy's own tokens
            assert batch.mask[row, : len(s.response_ids)].tolist() == s.model_mask()
        assert tr.rollout.last_stats["rollout/tool_calls"] == sum(s.tool_calls for s in samples)
        losses.append(tr.update(samples)["loss"])
    assert called, "no episode called a tool"
    out = family.protocol
    for s in called:
        assert out.output_open.strip() in s.text and s.tool_calls <= cfg.rl.max_tool_calls
        # the masked span is the tool output: its tokens decode to the output text, nothing else is masked
        env = [t for t, own in zip(s.response_ids, s.model_mask(), strict=True) if not own]
        assert tok.decode(env).strip().startswith(out.output_open.strip())
        assert tok.decode(env).count(out.output_close) == s.tool_calls
        assert all(lp == 0.0 for lp, own in zip(s.rollout_logprobs, s.model_mask(), strict=True) if not own)
    assert all(math.isfinite(x) for x in losses) and any(x != 0.0 for x in losses)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def _grads(smoke_cfg: TrainConfig, tool: list[int], tool_lp: float, masked: bool) -> list[torch.Tensor]:
    """The policy gradient of one update on two samples; the first ends in a tool output `tool`."""
    tr = trainer(smoke_cfg, algo="grpo", turns=1, mismatch="seq_tis", mismatch_options={"upper": 2.0})
    rows = [sample(0, 0, 1.0, verdict(True), [11, 12, 13]), sample(1, 0, 0.0, verdict(False), [21, 22])]
    if masked:  # the environment's tokens, with garbage placeholder log-probs
        rows[0].extend(tool, "")
        rows[0].rollout_logprobs[-len(tool):] = [tool_lp] * len(tool)
    else:  # the same tokens counted as the policy's
        rows[0].extend(tool, "", logprobs=[tool_lp] * len(tool))
    tr.update(rows)
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in tr.model.parameters()]


def test_tool_output_tokens_add_no_gradient(smoke_cfg: TrainConfig) -> None:
    """Changing the tool output (its tokens, length and placeholder log-probs) leaves the gradient
    unchanged; counting the same tokens as the policy's changes it (so the comparison can fail)."""
    a = _grads(smoke_cfg, [50, 51], -50.0, masked=True)
    b = _grads(smoke_cfg, [60, 61, 62], 0.0, masked=True)
    unmasked = _grads(smoke_cfg, [50, 51], -50.0, masked=False)
    assert any(float(g.abs().max()) > 0 for g in a)
    for x, y in zip(a, b, strict=True):
        assert torch.allclose(x, y, rtol=1e-5, atol=1e-8)
    assert not all(torch.allclose(x, y, rtol=1e-5, atol=1e-8) for x, y in zip(a, unmasked, strict=True))


def test_sample_extend_keeps_token_records_aligned() -> None:
    s = sample(0, 0, 0.0, verdict(False), [1, 2])
    s.extend([7, 8, 9], " <out>ok</out>")
    s.extend([3], " v", logprobs=[-0.5], versions=[4])
    assert s.model_mask() == [True, True, False, False, False, True]
    assert s.rollout_logprobs == [-1.0, -1.0, 0.0, 0.0, 0.0, -0.5] and s.versions == [0, 0, 0, 0, 0, 4]
    assert len(s.response_ids) == len(s.rollout_logprobs) == len(s.versions) == 6
    with pytest.raises(ValueError):
        TrainConfig.model_validate({**TrainConfig().model_dump(), "rl": {"tools": True, "max_tool_calls": 0}})
