"""The main job: task family + tokenizer and model -> SFT warm-up -> held-out eval -> RL against the real
gym -> held-out eval -> report. Checkpoints every `checkpoint_every` RL steps; `resume=True` continues
from the newest checkpoint of the run directory exactly where it stopped."""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kernelrl.evaluate import EvalConfig, EvalPool, EvalResult
from kernelrl.evaluate.costs import summarise_costs
from kernelrl.generation import Engine
from kernelrl.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from kernelrl.train.config import TrainConfig
from kernelrl.train.logs import MetricsLogger, Progress
from kernelrl.train.model import build_model, encode_answer
from kernelrl.train.report import write_report
from kernelrl.train.rollout import EvalCache, judge_answers
from kernelrl.train.sft import sft_train
from kernelrl.train.task_family import TaskFamily, TinyFamily, make_family, warmup_pairs
from kernelrl.train.trainer import RLTrainer


def save_weights(model: Any, path: Path) -> None:
    """Model weights as safetensors, written to a temporary name then renamed."""
    from safetensors.torch import save_file

    tmp = path.with_name(path.name + ".tmp")
    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}, str(tmp))
    tmp.replace(path)


def load_weights(model: Any, path: Path, field: str) -> None:
    """Load safetensors weights into `model`; a missing file or another architecture is an error naming `field`."""
    from safetensors.torch import load_file

    if not path.is_file():
        raise FileNotFoundError(f"{field}: no weights file {path}")
    try:
        model.load_state_dict(load_file(str(path)))
    except RuntimeError as e:
        raise ValueError(f"{field}: {path} does not fit the configured model ({str(e).splitlines()[0]} ...)") from e


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def eval_config(cfg: TrainConfig) -> EvalConfig:
    """The pool's gym config: the `eval` section itself, less the trainer's pool settings."""
    return cfg.eval.gym_config(hybrid=cfg.task.hybrid)


def sft_pairs(tok: Any, chains: list[tuple[str, ...]], seed: int, per_chain: int = 2) -> list[tuple[list[int], list[int]]]:
    """The tiny family's SFT data: generated solutions of `chains`, C forms drawn at random."""
    return TinyFamily([], []).sft_pairs(tok, list(chains), seed, per_item=per_chain)


def _score(results: list[EvalResult | None]) -> dict[str, float]:
    n = max(1, len(results))
    ok = [r for r in results if r is not None and r.correct]
    sp = [r.speedup for r in ok if r.speedup]
    return {"pass_rate": len(ok) / n, "fast_1": sum(1 for s in sp if s > 1.0) / n,
            "mean_speedup": sum(sp) / len(sp) if sp else 0.0, "n": float(len(results))}


def heldout_eval(engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable],
                 cfg: TrainConfig) -> dict[str, Any]:
    """Pass rate, fast_1 (correct and faster than eager) and mean speedup of correct answers on the
    held-out items of `cache.family` for the policy `engine` samples: greedy (one answer per item) and,
    when `eval.heldout_samples` > 1, sampled at temperature 1 (`sampled_*`, that many answers per item)."""
    out: dict[str, Any] = {}
    for prefix, n in (("", 1), ("sampled_", cfg.eval.heldout_samples)):
        if prefix and n == 1:
            continue
        judged = judge_answers(engine, tok, cache, items, samples=n, max_new_tokens=cfg.rl.max_new_tokens,
                               seed=cfg.seed + 17)
        out.update({prefix + k: v for k, v in _score([s.result for per in judged for s in per]).items()})
        if not prefix:
            out["examples"] = [per[0].text for per in judged[:4]]
    return out


def start_run(cfg: TrainConfig, run_dir: str | Path | None, echo: bool, what: str) -> Path:
    """Threads and seeds set, the run directory made and the config saved in it; `echo`: one line naming
    the run directory and the saved config (``kernelrl train --print-config`` prints the config itself)."""
    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    run = Path(run_dir or cfg.out_dir)
    run.mkdir(parents=True, exist_ok=True)
    saved = cfg.save(run)
    if echo:
        print(f"kernelrl train: {what} {run}; resolved config saved to {saved}", flush=True)
    return run


def stage_start(name: str, t_start: float, echo: bool) -> None:
    """With `echo`, one line as stage `name` of the run starts (before its progress bar)."""
    if echo:
        print(f"[stage {name}] start ({time.perf_counter() - t_start:.0f} s into the run)", flush=True)


def run_train(cfg: TrainConfig, *, resume: bool = False, run_dir: str | Path | None = None,
              stop_after: int | None = None, echo: bool = True, pool: EvalPool | None = None,
              cache: EvalCache | None = None, report: bool = True) -> dict[str, Any]:
    """Run the whole job; returns a summary (also written to ``summary.json``).

    `stop_after` ends the RL loop after that many total steps (to test resume); the final eval and
    report are then skipped. `pool`: an existing evaluation pool to use (else one is started); `cache`:
    an `EvalCache` over the same task family to share verdicts with other runs (then `pool` is unused).
    `model.init_from`: the policy starts from those weights (before SFT; ``sft.steps=0`` skips SFT).
    `report`: write ``report.md`` and its plots (off for a repro's sub-runs).
    A config with `pipeline.stages` runs those stages instead (`kernelrl.train.stages`; `resume` continues
    after the last finished stage, `stop_after` counts stages there).
    """
    if cfg.pipeline.stages:
        from kernelrl.train.stages import run_stages

        return run_stages(cfg, run_dir=run_dir, echo=echo, pool=pool, resume=resume, stop_after_stage=stop_after)
    t_start = time.perf_counter()
    run = start_run(cfg, run_dir, echo, "run directory")
    family = make_family(cfg.task, cfg.seed)
    train_items, heldout = family.train_items, family.heldout_items
    model, tok = build_model(cfg.model, family.tokenizer_corpus(), cfg.seed)
    if cfg.model.init_from:
        load_weights(model, Path(cfg.model.init_from), "model.init_from")
    logger = MetricsLogger(run, cfg.tensorboard, fresh=not resume)
    ckpt = latest_checkpoint(run) if resume else None
    summary: dict[str, Any] = {"config": cfg.model_dump()}
    times: dict[str, float] = {}
    own_pool = pool is None and cache is None
    if own_pool:
        pool = EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox)
    try:
        cache = cache or EvalCache(pool, family)  # type: ignore[arg-type]
        if ckpt is None:
            stage_start("sft", t_start, echo)
            t0 = time.perf_counter()
            # empty: no warm-up data, SFT is skipped
            warmup = warmup_pairs(family, tok, train_items, cfg.seed, cfg.sft.fix_fraction, cache.submit,
                                  faster_fraction=cfg.sft.faster_fraction)
            pairs, summary["sft_fix_pairs"], summary["sft_faster_pairs"] = warmup.pairs, warmup.fixes, warmup.fasters
            summary["sft_pairs"] = len(pairs)
            losses = sft_train(model, pairs, steps=cfg.sft.steps, batch_size=cfg.sft.batch_size, lr=cfg.sft.lr,
                               seed=cfg.seed, pad_id=tok.pad_token_id)
            for i, loss in enumerate(losses):
                logger.log("sft", i, {"loss": loss})
            times["sft_s"] = time.perf_counter() - t0
            save_weights(model, run / "sft_policy.safetensors")  # the pre-RL reference (Direct-OPD's teacher_ref)
        max_ctx = cfg.model.max_positions
        trainer = RLTrainer(cfg.rl, model, tok, cache, train_items, seed=cfg.seed, max_context=max_ctx)
        models = trainer.checkpoint_models()
        if ckpt is not None:
            state = load_checkpoint(ckpt, models=models, optimizers=trainer.optimizers)
            trainer.step_count = state["step"]
            if "rollout" in state:
                trainer.rollout.load_state_dict(state["rollout"])
            else:  # checkpoints written before the rollout state was saved
                trainer.rollout.stream.cursor = state["cursor"]
            trainer.engine.update_weights(version=state.get("policy_version"))
            summary["after_sft"] = state["after_sft"]
            summary["resumed_from"] = str(ckpt)
            if echo:
                print(f"[resume] at RL step {trainer.step_count} ({ckpt})", flush=True)
        else:
            stage_start("heldout_sft", t_start, echo)
            t0 = time.perf_counter()
            summary["after_sft"] = heldout_eval(trainer.engine, tok, cache, heldout, cfg)
            times["heldout_sft_s"] = time.perf_counter() - t0
            logger.log("heldout", 0, {k: v for k, v in summary["after_sft"].items() if k != "examples"})
            if cfg.sft.rft_rounds:
                stage_start("rft", t_start, echo)
                summary["rft"] = rejection_finetune(cfg, trainer, cache, train_items, logger)
        total = cfg.rl.steps if stop_after is None else min(cfg.rl.steps, stop_after)
        stage_start("rl", t_start, echo)
        bar = Progress(total - trainer.step_count, f"RL {cfg.rl.algo}/{cfg.rl.rollout}", cfg.progress)
        t0 = time.perf_counter()
        step_times: dict[str, list[float]] = {"time/generate": [], "time/evaluate_wait": []}
        while trainer.step_count < total:
            m = trainer.step()
            logger.log("rl", trainer.step_count, m)
            for name, values in step_times.items():
                if name in m:
                    values.append(float(m[name]))
            bar.advance(f"reward {m['reward/mean']:.2f} pass {m['rollout/pass_rate']:.2f}")
            every = cfg.checkpoint_every
            if (every and trainer.step_count % every == 0) or trainer.step_count == total:
                save_checkpoint(run / "checkpoints" / f"step_{trainer.step_count}", models=models,
                                optimizers=trainer.optimizers,
                                state={"step": trainer.step_count, "cursor": trainer.rollout.cursor,
                                       "rollout": trainer.rollout.state_dict(),
                                       "policy_version": trainer.engine.policy_version,
                                       "after_sft": summary["after_sft"]})
        bar.close()
        times["rl_s"] = time.perf_counter() - t0
        if stop_after is not None and trainer.step_count < cfg.rl.steps:
            return summary
        stage_start("heldout_rl", t_start, echo)
        t0 = time.perf_counter()
        summary["after_rl"] = heldout_eval(trainer.engine, tok, cache, heldout, cfg)
        times["heldout_rl_s"] = time.perf_counter() - t0
        logger.log("heldout", trainer.step_count, {k: v for k, v in summary["after_rl"].items() if k != "examples"})
        save_weights(model, run / "policy.safetensors")
        times["total_s"] = time.perf_counter() - t_start
        summary["times"] = times
        summary["eval_cache"] = {"submitted": cache.submitted, "hits": cache.hits}
        summary["rl_step_times"] = {name: statistics.median(v) for name, v in step_times.items() if v}
        if getattr(cache.pool, "cost_log", None) is not None:
            summary["gym_costs"] = summarise_costs(cache.pool.cost_log, getattr(cache.pool, "reference_log", ()))
        (run / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        if report:
            write_report(run, summary)
        return summary
    finally:
        logger.close()
        if own_pool and pool is not None:
            pool.close()


def rejection_finetune(cfg: TrainConfig, trainer: RLTrainer, cache: EvalCache, chains: list[Hashable],
                       logger: MetricsLogger) -> dict[str, float]:
    """RFT: sample the train items, keep the answers the gym passed, fine-tune on them (per round)."""
    family: TaskFamily = cache.family
    kept_total = 0
    rng = random.Random(cfg.seed + 99)
    for rnd in range(cfg.sft.rft_rounds):
        pick = rng.sample(chains, min(len(chains), cfg.rl.prompts_per_step * 2))
        judged = [s for per in judge_answers(trainer.engine, trainer.tok, cache, pick, samples=cfg.rl.group_size,
                                             max_new_tokens=cfg.rl.max_new_tokens, seed=cfg.seed + 1000 * rnd)
                  for s in per]
        passing = [(family.prompt_ids(trainer.tok, s.item), encode_answer(trainer.tok, s.text))
                   for s in judged if s.result is not None and s.result.correct]
        kept_total += len(passing)
        losses = sft_train(trainer.model, passing, steps=cfg.sft.rft_steps, batch_size=cfg.sft.batch_size,
                           lr=cfg.sft.lr, seed=cfg.seed + rnd, pad_id=trainer.tok.pad_token_id)
        logger.log("rft", rnd, {"kept": len(passing), "sampled": len(judged), "loss": losses[-1] if losses else 0.0})
        trainer.engine.update_weights()
    return {"kept": float(kept_total)}
