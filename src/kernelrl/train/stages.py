"""Staged training, CUDA Agent's recipe (Dai et al. 2026, "CUDA Agent: Large-Scale Agentic RL for
High-Performance CUDA Kernel Generation", arXiv 2602.24286) at CPU scale: `pipeline.stages` names them
in order (`config.STAGE_NAMES`), each followed by a held-out evaluation (`job.heldout_eval`).

- ``sft``: supervised warm-up on the family's SFT pairs (the `sft` section); our tiny model starts from
  random weights where CUDA Agent starts from a pretrained LM.
- ``warmup_rl``: single-turn RL warm-up (`pipeline.warmup_rl`: steps, estimator; other settings from `rl`).
- ``rft``: rejection fine-tuning on agent trajectories: multi-turn episodes (gym feedback as the next user
  turn) sampled from the warm policy; episodes whose last turn the gym passed (status ok) are kept and
  SFT'd on (`pipeline.rft`).
- ``critic``: critic pretraining with the actor frozen (`pipeline.critic`): the critic of the ``ppo`` stage
  (copied from the policy after RFT, `train.critic`) fits GAE returns of the frozen actor's rollouts, so PPO
  starts with an informed baseline instead of a zero one.
- ``ppo``: PPO with that critic (``rl.algo=gae``; GAE over whole multi-turn episodes) for ``rl.steps``.

Writes ``summary.json`` (``stages``: per stage its held-out results, its own metrics and seconds),
``report.md`` with a stage table, ``metrics.jsonl`` (phases ``sft``, ``warmup_rl``, ``rft``, ``critic``,
``rl``), ``sft_policy.safetensors`` and ``policy.safetensors``.

After each stage (and its held-out eval) the run is checkpointed in ``stages/<k>_<name>/``
(`checkpoint.save_checkpoint`: the policy, the ``ppo`` stage's critic and optimizers once it exists, RNG
states, the summary so far). ``resume=True`` continues after the newest complete stage of a run with the
same stage list and model; a stage interrupted half-way runs again from its start.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.evaluate import EvalPool
from kernelrl.generation import Engine
from kernelrl.train.checkpoint import load_checkpoint, save_checkpoint
from kernelrl.train.config import TrainConfig
from kernelrl.train.job import eval_config, heldout_eval, save_weights, stage_start, start_run
from kernelrl.train.logs import MetricsLogger, Progress
from kernelrl.train.model import build_model
from kernelrl.train.report import write_report
from kernelrl.train.rollout import EvalCache, Sample, collect_episodes
from kernelrl.train.sft import sft_train
from kernelrl.train.task_family import TaskFamily, make_family, warmup_pairs
from kernelrl.train.trainer import RLTrainer


@dataclass
class StagedRun:
    """What the stages share: config, policy, tokenizer, family, gym cache, logger, run directory."""

    cfg: TrainConfig
    model: Any
    tok: Any
    family: TaskFamily
    cache: EvalCache
    logger: MetricsLogger
    run: Path
    engine: Engine  # for held-out evals (shares the policy module)
    ppo: RLTrainer | None = None
    rl_steps: int = 0  # RL updates so far over all stages (the x axis of the metrics)
    echo: bool = True
    notes: dict[str, Any] = field(default_factory=dict)

    def ppo_trainer(self) -> RLTrainer:
        """The ``ppo`` stage's trainer (made on first use: the critic stage trains its critic)."""
        if self.ppo is None:
            self.ppo = RLTrainer(self.cfg.rl, self.model, self.tok, self.cache, self.family.train_items,
                                 seed=self.cfg.seed + 3, max_context=self.cfg.model.max_positions)
        return self.ppo

    def rl_loop(self, trainer: RLTrainer, steps: int, phase: str) -> dict[str, float]:
        bar = Progress(steps, f"{phase} {trainer.cfg.algo}", self.cfg.progress)
        last: dict[str, float] = {}
        for _ in range(steps):
            last = trainer.step()
            self.rl_steps += 1
            self.logger.log(phase, self.rl_steps, last)
            bar.advance(f"reward {last['reward/mean']:.2f} pass {last['rollout/pass_rate']:.2f}")
        bar.close()
        return {"steps": float(steps), **{k: last[k] for k in ("reward/mean", "rollout/pass_rate") if k in last}}


def _fingerprint(model: Any) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def stage_sft(r: StagedRun) -> dict[str, Any]:
    cfg = r.cfg
    warmup = warmup_pairs(r.family, r.tok, list(r.family.train_items), cfg.seed, cfg.sft.fix_fraction, r.cache.submit,
                          faster_fraction=cfg.sft.faster_fraction)
    pairs = warmup.pairs
    losses = sft_train(r.model, pairs, steps=cfg.sft.steps, batch_size=cfg.sft.batch_size, lr=cfg.sft.lr,
                       seed=cfg.seed, pad_id=r.tok.pad_token_id)
    for i, loss in enumerate(losses):
        r.logger.log("sft", i, {"loss": loss})
    save_weights(r.model, r.run / "sft_policy.safetensors")
    return {"pairs": len(pairs), "fix_pairs": warmup.fixes, "faster_pairs": warmup.fasters, "loss_last": losses[-1] if losses else None}


def stage_warmup_rl(r: StagedRun) -> dict[str, Any]:
    w = r.cfg.pipeline.warmup_rl
    rl = r.cfg.rl.model_copy(update={"algo": w.algo, "steps": w.steps, "turns": 1})
    trainer = RLTrainer(rl, r.model, r.tok, r.cache, r.family.train_items, seed=r.cfg.seed + 1,
                        max_context=r.cfg.model.max_positions)
    return r.rl_loop(trainer, w.steps, "warmup_rl")


def rft_pairs(samples: list[Sample], train_turns: str) -> tuple[list[tuple[list[int], list[int]]], dict[str, float]]:
    """RFT data from judged episodes: the (context ids, response ids) of the turns of each episode whose
    last turn the gym passed (`train_turns`: ``all`` its turns, ``final`` only the passing one), and counts."""
    episodes: dict[tuple[int, int], list[Sample]] = {}
    for s in samples:
        episodes.setdefault((s.group, s.episode), []).append(s)
    pairs: list[tuple[list[int], list[int]]] = []
    kept, solved_late = 0, 0
    for turns in episodes.values():
        turns.sort(key=lambda s: s.turn)
        last = turns[-1]
        if last.result is None or not last.result.correct:
            continue
        kept += 1
        solved_late += last.turn > 0
        for s in turns if train_turns == "all" else [last]:
            pairs.append((list(s.prompt_ids), list(s.response_ids)))
    n = max(1, len(episodes))
    return pairs, {"episodes": float(len(episodes)), "kept": float(kept), "kept_share": kept / n,
                   "kept_solved_after_feedback": float(solved_late), "turns": float(len(samples)),
                   "pairs": float(len(pairs))}


def stage_rft(r: StagedRun) -> dict[str, Any]:
    cfg, c = r.cfg, r.cfg.pipeline.rft
    items: list[Hashable] = random.Random(cfg.seed + 2).sample(r.family.train_items, min(c.prompts, len(r.family.train_items)))
    engine = Engine(r.model, r.tok, max_batch_size=len(items) * c.episodes, max_context=cfg.model.max_positions,
                    seed=cfg.seed + 2)
    samples = collect_episodes(engine, r.tok, r.cache, items, group_size=c.episodes, turns=c.turns,
                               max_new_tokens=cfg.rl.max_new_tokens, seed=cfg.seed + 2, stop_at_first_correct=True,
                               temperature=cfg.rl.temperature)
    pairs, stats = rft_pairs(samples, c.train_turns)
    stats["steps"] = float(math.ceil(c.epochs * len(pairs) / c.batch_size))
    losses = sft_train(r.model, pairs, steps=int(stats["steps"]), batch_size=c.batch_size, lr=c.lr,
                       seed=cfg.seed + 2, pad_id=r.tok.pad_token_id)
    for i, loss in enumerate(losses):
        r.logger.log("rft", i, {"loss": loss})
    r.logger.log("rft_data", 0, stats)
    return {**stats, "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None}


def stage_critic(r: StagedRun) -> dict[str, Any]:
    c = r.cfg.pipeline.critic
    trainer = r.ppo_trainer()
    before = _fingerprint(r.model)
    rows = []
    for i in range(c.steps):
        m = trainer.critic_step(epochs=c.epochs)
        r.logger.log("critic", i + 1, m)
        rows.append(m)
    out: dict[str, Any] = {"steps": float(c.steps), "actor_unchanged": _fingerprint(r.model) == before}
    for key in ("critic/value_loss", "critic/explained_variance"):
        if rows:
            out[key + "_first"], out[key + "_last"] = rows[0][key], rows[-1][key]
    return out


def stage_ppo(r: StagedRun) -> dict[str, Any]:
    trainer = r.ppo_trainer()
    return r.rl_loop(trainer, r.cfg.rl.steps, "rl")


STAGES: dict[str, Callable[[StagedRun], dict[str, Any]]] = {
    "sft": stage_sft, "warmup_rl": stage_warmup_rl, "rft": stage_rft, "critic": stage_critic, "ppo": stage_ppo,
}
#: what must match for a resumed staged run to continue the saved one rather than mix two runs
RESUME_FIELDS = ("seed", "model", "task", "pipeline")


def _stage_dir(run: Path, index: int, name: str) -> Path:
    return run / "stages" / f"{index}_{name}"


def _stage_modules(ppo: RLTrainer | None, policy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a stage checkpoint holds: the policy, and once the ``ppo`` stage's trainer exists its critic,
    reference and optimizers."""
    return (ppo.checkpoint_models(), dict(ppo.optimizers)) if ppo is not None else ({"policy": policy}, {})


def save_stage(r: StagedRun, index: int, name: str, summary: dict[str, Any], times: dict[str, float]) -> Path:
    """Checkpoint the run after stage `index` (`name`): weights, optimizers and RNG states, summary so far."""
    models, optimizers = _stage_modules(r.ppo, r.model)
    rollout = r.ppo.rollout.state_dict() if r.ppo is not None else None
    state = {"stage": index, "rollout": rollout, "name": name, "rl_steps": r.rl_steps, "stages": summary["stages"], "times": times,
             "ppo": r.ppo is not None, "config": {k: summary["config"][k] for k in RESUME_FIELDS}}
    return save_checkpoint(_stage_dir(r.run, index, name), models=models, optimizers=optimizers, state=state)


def latest_stage(run: Path, cfg: TrainConfig) -> Path | None:
    """The newest complete stage checkpoint of `run`; ValueError when it was written by another config."""
    found = [p for p in (run / "stages").glob("[0-9]*_*") if (p / "state.json").is_file()
             and not p.name.endswith((".tmp", ".old"))]
    if not found:
        return None
    last = max(found, key=lambda p: int(p.name.split("_")[0]))
    saved = json.loads((last / "state.json").read_text())["config"]
    mine = cfg.model_dump()
    differ = [k for k in RESUME_FIELDS if saved.get(k) != mine[k]]
    if differ:
        raise ValueError(f"resume: {run} holds a staged run with other {', '.join(differ)} settings; "
                         "use another run directory (--out) or the same config")
    return last


def resume_stage(r: StagedRun, checkpoint: Path) -> dict[str, Any]:
    """Load a stage checkpoint into `r`; returns its saved state (summary of the stages done)."""
    head = json.loads((checkpoint / "state.json").read_text())
    models, optimizers = _stage_modules(r.ppo_trainer() if head["ppo"] else None, r.model)
    state = load_checkpoint(checkpoint, models=models, optimizers=optimizers)
    if r.ppo is not None and state["rollout"] is not None:
        r.ppo.rollout.load_state_dict(state["rollout"])
    r.rl_steps = int(state["rl_steps"])
    r.engine.update_weights()
    return state


def run_stages(cfg: TrainConfig, *, run_dir: str | Path | None = None, echo: bool = True,
               pool: EvalPool | None = None, resume: bool = False, stop_after_stage: int | None = None) -> dict[str, Any]:
    """Run `cfg.pipeline.stages` in order, a held-out eval and a checkpoint after each; returns the
    summary (also ``summary.json``, with ``after_sft`` / ``after_rl`` = the first / last stage's held-out
    results for the report). `resume`: continue after the newest saved stage; `stop_after_stage`: end
    after that many stages in all (to test resume; no final report then)."""
    t_start = time.perf_counter()
    run = start_run(cfg, run_dir, echo, f"staged run {cfg.pipeline.stages} in")
    family = make_family(cfg.task, cfg.seed)
    model, tok = build_model(cfg.model, family.tokenizer_corpus(), cfg.seed)
    logger = MetricsLogger(run, cfg.tensorboard, fresh=not resume)
    own_pool = pool is None
    pool = pool or EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox)
    summary: dict[str, Any] = {"config": cfg.model_dump(), "stages": {}}
    times: dict[str, float] = {}
    try:
        cache = EvalCache(pool, family)
        width = len(family.heldout_items) * cfg.eval.heldout_samples
        engine = Engine(model, tok, max_batch_size=max(1, width), max_context=cfg.model.max_positions, seed=cfg.seed)
        r = StagedRun(cfg, model, tok, family, cache, logger, run, engine, echo=echo)
        done = 0
        checkpoint = latest_stage(run, cfg) if resume else None
        if checkpoint is not None:
            state = resume_stage(r, checkpoint)
            summary["stages"], times = state["stages"], dict(state["times"])
            done = int(state["stage"]) + 1
            summary["resumed_from"] = str(checkpoint)
            if echo:
                print(f"[resume] after stage {state['name']} ({checkpoint})", flush=True)
        for index, name in enumerate(cfg.pipeline.stages):
            if index < done:
                continue
            if stop_after_stage is not None and index >= stop_after_stage:
                return summary
            stage_start(name, t_start, echo)
            t0 = time.perf_counter()
            result = STAGES[name](r)
            times[f"{name}_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            engine.update_weights()  # the policy moved: drop KV computed by the old weights
            held = heldout_eval(engine, tok, cache, list(family.heldout_items), cfg)
            times[f"heldout_{name}_s"] = time.perf_counter() - t1
            logger.log("heldout", len(summary["stages"]), {"stage": name, **{k: v for k, v in held.items()
                                                                              if k != "examples"}})
            summary["stages"][name] = {"heldout": held, **result}
            save_stage(r, index, name, summary, times)
            if echo:
                print(f"[stage {name}] {times[name + '_s']:.0f} s; held-out pass {held['pass_rate']:.3f} "
                      f"fast_1 {held['fast_1']:.3f}", flush=True)
        stages = list(summary["stages"].values())
        if stages:
            summary["after_sft"], summary["after_rl"] = stages[0]["heldout"], stages[-1]["heldout"]
        save_weights(model, run / "policy.safetensors")
        times["total_s"] = time.perf_counter() - t_start
        summary["times"] = times
        summary["eval_cache"] = {"submitted": cache.submitted, "hits": cache.hits}
        (run / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        write_report(run, summary)
        return summary
    finally:
        logger.close()
        if own_pool:
            pool.close()
