"""Training one arm under a fixed compute budget on CPU, with periodic raw-byte BPB evaluation."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from kernelrl.config_system import ConfigModel
from kernelrl.proxy.evaluate import evaluate_bpb
from kernelrl.proxy.mixing import MixedStream
from kernelrl.proxy.model import ByteLM, LMOutput, ModelConfig, train_flops_per_token


class ArmTrainingConfig(ConfigModel):
    """How one arm trains: optimiser, shapes and the compute budget (exactly one of tokens or FLOPs).

    A token budget is turned into FLOPs with the byte-only model's cost per token, so every arm
    gets the same FLOPs; an arm whose model costs more per token (a bigger head) takes fewer steps.
    """

    seq_len: int = Field(512, ge=8)
    batch_size: int = Field(8, ge=1)
    lr: float = Field(2e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0)
    warmup_steps: int = Field(20, ge=0)
    weight_decay: float = Field(0.1, ge=0.0)
    grad_clip: float = Field(1.0, gt=0)
    budget_tokens: int | None = Field(None, ge=1)
    budget_flops: float | None = Field(None, gt=0)
    n_evals: int = Field(8, ge=1)
    eval_batch_size: int = Field(16, ge=1)
    min_steps: int = Field(2, ge=1, description="fewer steps than this means the budget is too small")

    @model_validator(mode="after")
    def _one_budget(self) -> ArmTrainingConfig:
        if (self.budget_tokens is None) == (self.budget_flops is None):
            raise ValueError("budget_tokens: set exactly one of train.budget_tokens and train.budget_flops")
        return self

    def flops_budget(self, reference: ModelConfig) -> float:
        """The budget in FLOPs (tokens are priced with `reference`, the byte-only model)."""
        if self.budget_flops is not None:
            return float(self.budget_flops)
        assert self.budget_tokens is not None
        return self.budget_tokens * train_flops_per_token(reference, self.seq_len)

    def steps_for(self, model: ModelConfig, flops: float) -> int:
        """Optimiser steps `model` can take within `flops`; raises when that is below `min_steps`."""
        per_step = train_flops_per_token(model, self.seq_len) * self.batch_size * self.seq_len
        steps = int(flops // per_step)
        if steps < self.min_steps:
            raise ValueError(
                f"compute budget too small: {flops:.3g} FLOPs buys {steps} steps of {per_step:.3g} FLOPs "
                f"(need at least {self.min_steps}); raise train.budget_tokens/budget_flops"
            )
        return steps


@dataclass
class CurvePoint:
    step: int
    tokens: int
    flops: float
    val_bpb: float
    train_loss: float | None
    seconds: float


@dataclass
class ArmResult:
    """Everything one arm produced."""

    name: str
    steps: int
    tokens: int
    flops: float
    final_bpb: float
    curve: list[CurvePoint]
    wall_seconds: float
    params: dict[str, int]
    vocab_size: int
    mix: dict[str, float] = field(default_factory=dict)
    compressor: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def lm_loss(out: LMOutput, targets: torch.Tensor, is_raw: torch.Tensor) -> torch.Tensor:
    """Mean next-id cross-entropy (nats). targets, is_raw: [B, T].

    With a raw-byte head, raw-byte targets are scored by that head and all others by the main head.
    """
    if out.raw_logits is None:
        return F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), targets.reshape(-1))
    total = F.cross_entropy(out.raw_logits[is_raw], targets[is_raw], reduction="sum") if is_raw.any() else 0.0
    rest = ~is_raw
    if rest.any():
        total = total + F.cross_entropy(out.logits[rest], targets[rest], reduction="sum")
    assert isinstance(total, torch.Tensor)
    return total / targets.numel()


def lr_at(step: int, steps: int, cfg: ArmTrainingConfig) -> float:
    """Linear warm-up, then cosine decay to `min_lr_ratio * lr`."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def eval_steps(steps: int, n_evals: int) -> list[int]:
    """Steps (after that many updates) at which to evaluate: 0, ..., steps."""
    return sorted({round(steps * i / n_evals) for i in range(n_evals + 1)})


def train_arm(
    name: str,
    model_cfg: ModelConfig,
    stream: MixedStream,
    val: tuple[torch.Tensor, torch.Tensor],
    cfg: ArmTrainingConfig,
    steps: int,
    seed: int,
    on_step: Callable[[int, float], None] | None = None,
    on_eval: Callable[[CurvePoint], None] | None = None,
    evaluator: Callable[[ByteLM], float] | None = None,
) -> ArmResult:
    """Train a fresh `ByteLM` for `steps` steps on `stream`, evaluating raw BPB on `val` along the way.

    `on_step(step, loss)` runs after every update, `on_eval(point)` after every evaluation;
    `evaluator(model)`, when given, replaces raw-byte BPB on `val` (the tokenizer-only baseline).
    """
    if model_cfg.max_len < cfg.seq_len:
        raise ValueError(f"model.max_len={model_cfg.max_len} is shorter than train.seq_len={cfg.seq_len}")
    if model_cfg.vocab_size != stream.layout.vocab_size:
        raise ValueError("model vocab_size does not match the stream's id layout")
    torch.manual_seed(seed)
    model = ByteLM(model_cfg)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    per_token = train_flops_per_token(model_cfg, cfg.seq_len)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    evals = set(eval_steps(steps, cfg.n_evals))
    curve: list[CurvePoint] = []
    t0 = time.perf_counter()
    loss_val: float | None = None

    def evaluate(step: int) -> None:
        model.eval()
        bpb = evaluator(model) if evaluator else evaluate_bpb(model, *val, batch_size=cfg.eval_batch_size)
        model.train()
        tokens = step * tokens_per_step
        curve.append(CurvePoint(step, tokens, tokens * per_token, bpb, loss_val, time.perf_counter() - t0))
        if on_eval is not None:
            on_eval(curve[-1])

    for step in range(steps):
        if step in evals:
            evaluate(step)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, cfg)
        batch, is_raw = stream.next_batch(cfg.batch_size, cfg.seq_len, progress=step / steps)
        loss = lm_loss(model(batch[:, :-1]), batch[:, 1:], is_raw[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        loss_val = loss.item()
        if not math.isfinite(loss_val):
            raise FloatingPointError(f"arm {name!r}: loss became {loss_val} at step {step}")
        if on_step is not None:
            on_step(step + 1, loss_val)
    evaluate(steps)
    n_embed = model.embed.weight.numel()
    counts = {"embedding": n_embed, "other": sum(p.numel() for p in model.parameters()) - n_embed}
    return ArmResult(
        name=name,
        steps=steps,
        tokens=steps * tokens_per_step,
        flops=steps * tokens_per_step * per_token,
        final_bpb=curve[-1].val_bpb,
        curve=curve,
        wall_seconds=time.perf_counter() - t0,
        params=counts,
        vocab_size=model_cfg.vocab_size,
        mix=stream.stats.as_dict(),
    )

