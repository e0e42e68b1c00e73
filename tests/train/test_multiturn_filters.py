"""Issue 16, multi-turn refinement and PRIME's accuracy filter on the trainer's default path:

- `rl.stop_at_first_correct=False` (KernelGYM) runs every episode to the turn limit, correct ones included;
- `rl.accuracy_filter=[low, high]` (PRIME) drops whole prompts whose share of solved episodes is outside it.

A stub cache stands in for the gym (every answer judged by a fixed rule); the engine and model are real."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Hashable

import pytest
import torch

from kernelrl.evaluate import EvalResult
from kernelrl.evaluate.result import Status, Timing
from kernelrl.train.config import RLConfig, TrainConfig
from kernelrl.train.elementwise_chains import tokenizer_corpus
from kernelrl.train.model import build_model
from kernelrl.train.rollout import EvalCache
from kernelrl.train.task_family import TinyFamily
from kernelrl.train.trainer import RLTrainer
from tests.train.test_prs_loss_mask import sample, trainer, verdict


class AllCorrect(EvalCache):
    """Judges every answer correct at 1.5x (never starts a gym)."""

    def __init__(self) -> None:
        super().__init__(None, TinyFamily([("relu", "neg")], []))  # type: ignore[arg-type]

    def submit(self, item: Hashable, answer: str) -> cf.Future[EvalResult]:
        fut: cf.Future[EvalResult] = cf.Future()
        fut.set_result(EvalResult(Status.OK, "t", "cpu", timing=Timing(speedup=1.5), kernel_calls={"k": 1}))
        return fut


@pytest.mark.parametrize("stop", [True, False])
def test_episodes_run_to_the_turn_limit_unless_stopping_at_first_correct(smoke_cfg: TrainConfig, stop: bool) -> None:
    torch.manual_seed(0)
    model, tok = build_model(smoke_cfg.model, tokenizer_corpus(), 0)
    cfg = smoke_cfg.rl.model_copy(update={"turns": 3, "stop_at_first_correct": stop, "max_new_tokens": 8,
                                          "prompts_per_step": 2, "group_size": 2})
    tr = RLTrainer(cfg, model, tok, AllCorrect(), [("relu", "neg")], seed=0,
                   max_context=smoke_cfg.model.max_positions)
    samples = tr.rollout.collect()
    turns = sorted(s.turn for s in samples)
    if stop:
        assert turns == [0, 0, 0, 0]
    else:  # 4 episodes x 3 turns; a later turn's context holds the correct turn's speedup as feedback
        assert turns == [0] * 4 + [1] * 4 + [2] * 4
        later = next(s for s in samples if s.turn == 2)
        assert "result: ok 1.5x" in tok.decode(later.prompt_ids)


def test_default_keeps_stop_at_first_correct() -> None:
    assert RLConfig().stop_at_first_correct is True and RLConfig().accuracy_filter is None
    with pytest.raises(ValueError):
        RLConfig(accuracy_filter=(0.9, 0.1))


def test_prime_accuracy_filter_drops_prompts_outside_the_range(smoke_cfg: TrainConfig) -> None:
    # prompt 0: both episodes solved (accuracy 1); prompt 1: one of two (0.5, the second one in two turns);
    # prompt 2: none solved (0)
    rows = [
        sample(0, 0, 1.0, verdict(True), [11, 12], group=0),
        sample(1, 0, 1.0, verdict(True), [13, 14], group=0),
        sample(0, 0, 0.0, verdict(False), [21, 22], group=1),
        sample(0, 1, 1.0, verdict(True), [23, 24], group=1),
        sample(1, 0, 0.0, verdict(False), [25, 26], group=1),
        sample(0, 0, 0.0, verdict(False), [31, 32], group=2),
        sample(1, 0, 0.0, verdict(False), [33, 34], group=2),
    ]
    tr = trainer(smoke_cfg, algo="grpo", accuracy_filter=(0.2, 0.8))
    batch = tr.advantages_and_mask(rows)
    assert [s.group for s in batch.samples] == [1, 1, 1]
    assert batch.metrics["accuracy_filter/dropped_fraction"] == pytest.approx(4 / 7)
    off = trainer(smoke_cfg, algo="grpo").advantages_and_mask(rows)
    assert len(off.samples) == 7
    tr.update(rows)  # a real update runs on what is left
