"""The byte LM, compute accounting and the training loop."""

from __future__ import annotations

import pytest
import torch

from kernelrl.proxy.evaluate import evaluate_bpb
from kernelrl.proxy.mixing import MixConfig, MixedStream, make_layout, pack_eval
from kernelrl.proxy.model import ByteLM, ModelConfig, count_params, train_flops_per_token
from kernelrl.proxy.train import ArmTrainingConfig, eval_steps, lr_at, train_arm


def small(**kw: object) -> ModelConfig:
    return ModelConfig(d_model=32, n_layers=2, n_heads=2, max_len=64, vocab_size=260, **kw)


def test_model_is_causal_and_has_an_optional_raw_head() -> None:
    torch.manual_seed(0)
    model = ByteLM(small(raw_head=True)).eval()
    x = torch.randint(0, 260, (2, 20))
    y = x.clone()
    y[:, 12:] = torch.randint(0, 260, (2, 8))
    out_x, out_y = model(x), model(y)
    assert out_x.logits.shape == (2, 20, 260) and out_x.raw_logits is not None
    assert out_x.raw_logits.shape == (2, 20, 256)
    assert torch.allclose(out_x.logits[:, :12], out_y.logits[:, :12], atol=1e-5)
    assert not torch.allclose(out_x.logits[:, 12:], out_y.logits[:, 12:])
    assert ByteLM(small()).forward(x).raw_logits is None
    with pytest.raises(ValueError, match="exceeds model max_len"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="heads of even size"):
        ModelConfig(d_model=30, n_heads=4)


def test_parameter_count_and_flops_match_the_module() -> None:
    for cfg in (small(), small(raw_head=True), small().model_copy(update={"vocab_size": 1284})):
        model = ByteLM(cfg)
        counts = count_params(cfg)
        assert counts["embedding"] + counts["compute"] == sum(p.numel() for p in model.parameters())
        assert train_flops_per_token(cfg, 64) == 6 * counts["compute"] + 6 * cfg.n_layers * 64 * cfg.d_model


def test_equal_compute_budget_gives_bigger_vocabularies_fewer_steps() -> None:
    cfg = ArmTrainingConfig(seq_len=64, batch_size=4, budget_tokens=64 * 4 * 100)
    base = small()
    flops = cfg.flops_budget(base)
    assert cfg.steps_for(base, flops) == 100
    assert cfg.steps_for(base.model_copy(update={"vocab_size": 1284}), flops) < 100
    with pytest.raises(ValueError, match="compute budget too small"):
        ArmTrainingConfig(seq_len=64, batch_size=4, budget_tokens=10).steps_for(base, 10 * flops / 25600)
    with pytest.raises(ValueError, match="exactly one"):
        ArmTrainingConfig()
    with pytest.raises(ValueError, match="exactly one"):
        ArmTrainingConfig(budget_tokens=5, budget_flops=1e9)


def test_schedule_and_eval_points() -> None:
    cfg = ArmTrainingConfig(budget_tokens=1, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, 100, cfg) == pytest.approx(1e-4)
    assert lr_at(10, 100, cfg) == pytest.approx(1e-3)
    assert lr_at(100, 100, cfg) == pytest.approx(1e-4)
    assert eval_steps(10, 4) == [0, 2, 5, 8, 10]


def test_training_lowers_raw_bpb_on_real_code(code_docs: list[bytes]) -> None:
    layout = make_layout(0, "auto")
    stream = MixedStream(code_docs[:150], None, layout, MixConfig(), seed=0)
    val = pack_eval(code_docs[150:170], seq_len=64)
    cfg = ArmTrainingConfig(seq_len=64, batch_size=8, budget_tokens=64 * 8 * 60, lr=3e-3, warmup_steps=5, n_evals=2)
    model_cfg = small(raw_head=True)
    steps = cfg.steps_for(model_cfg, cfg.flops_budget(model_cfg))
    seen: list[int] = []
    result = train_arm("bytes", model_cfg, stream, val, cfg, steps, seed=0, on_step=lambda s, _l: seen.append(s))
    assert seen == list(range(1, steps + 1))
    first, last = result.curve[0].val_bpb, result.curve[-1].val_bpb
    assert 7.5 < first < 8.5  # an untrained model is close to uniform
    assert last < first - 2.0  # 60 steps learn a lot of code statistics
    assert result.final_bpb == last and result.tokens == steps * 8 * 64
    assert result.curve[-1].flops == pytest.approx(result.flops)
    untrained = ByteLM(model_cfg)
    assert evaluate_bpb(untrained, *val) > last
