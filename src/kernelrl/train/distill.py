"""Direct-OPD (weak-to-strong on-policy distillation) for the tiny family.

A weak teacher improved by RL (``pi_T``, a tiny-cpu run's final policy) and its pre-RL reference
(``pi_Tref``, the same run's SFT policy) score a wider student's own samples; the dense token reward
``log pi_T(a_t) - log pi_Tref(a_t)`` (`kernelrl.rl.opd_token_rewards`) is the advantage
(`token_reward_direct`) of a clipped policy-gradient update. No gym call is needed to train; the
gym judges the student on held-out chains before and after. Running it again with another teacher
pair on the result composes shifts sequentially.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from kernelrl.evaluate import EvalPool
from kernelrl.generation import Engine, GenerationRequest, SamplingParams
from kernelrl.rl import (
    adaptive_kl_coef,
    kl_loss,
    opd_token_rewards,
    ppo_clip_loss,
    token_reward_direct_advantages,
)
from kernelrl.rl.masked import masked_mean
from kernelrl.train.config import TrainConfig
from kernelrl.train.family import make_task, prompt_text, split_chains, tokenizer_corpus
from kernelrl.train.job import eval_config, heldout_eval, run_train, save_weights, seed_everything, sft_pairs
from kernelrl.train.logprobs import response_logprobs
from kernelrl.train.logs import MetricsLogger
from kernelrl.train.model import build_model, clone_model, encode_prompt
from kernelrl.train.rollout import EvalCache
from kernelrl.train.sft import sft_train
from kernelrl.train.trainer import RLTrainer


def teacher_pair(cfg: TrainConfig, run: Path, pool: EvalPool | None = None) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(teacher, teacher_ref, tokenizer, info): from `distill.teacher_run`, else from the main run in
    `out_dir` (its final ``policy`` and pre-RL ``sft_policy``), else made by a short RL run."""
    main_run = Path(cfg.out_dir)
    if cfg.distill.teacher_run:
        teacher_dir = Path(cfg.distill.teacher_run)
    elif (main_run / "policy.safetensors").is_file() and (main_run / "sft_policy.safetensors").is_file():
        teacher_dir = main_run  # `kernelrl train` with the same preset left a teacher pair here
    else:
        teacher_dir = run / "teacher"
    info: dict[str, Any] = {"teacher_run": str(teacher_dir)}
    if not (teacher_dir / "policy.safetensors").is_file():
        tcfg = cfg.model_copy(deep=True)
        tcfg.rl.steps = cfg.distill.teacher_rl_steps
        tcfg.progress = False
        t0 = time.perf_counter()
        summary = run_train(tcfg, run_dir=teacher_dir, echo=False, pool=pool)
        info["teacher_train_s"] = time.perf_counter() - t0
        info["teacher_heldout"] = {k: summary[k]["pass_rate"] for k in ("after_sft", "after_rl")}
    teacher, tok = build_model(cfg.model, tokenizer_corpus(), cfg.seed)
    teacher.load_state_dict(load_file(str(teacher_dir / "policy.safetensors")))
    ref = clone_model(teacher)
    ref.load_state_dict(load_file(str(teacher_dir / "sft_policy.safetensors")))
    return clone_model(teacher), ref, tok, info


def run_distill(cfg: TrainConfig, pool: EvalPool | None = None) -> dict[str, Any]:
    """Teacher pair -> student SFT -> held-out eval -> Direct-OPD steps -> held-out eval; ``distill.json``.

    `pool`: an existing evaluation pool (else one is started)."""
    torch.set_num_threads(cfg.threads)
    run = Path(cfg.out_dir) / "distill"
    run.mkdir(parents=True, exist_ok=True)
    cfg.save(run)
    teacher, teacher_ref, tok, info = teacher_pair(cfg, run, pool)
    seed_everything(cfg.seed + 1)
    d = cfg.distill
    train, heldout = split_chains(seed=cfg.seed, min_len=cfg.task.min_ops, max_len=cfg.task.max_ops,
                                  n_train=cfg.task.n_train, n_heldout=cfg.task.n_heldout)
    if d.student == "teacher_ref":  # the pair's shift applied to a copy of the pre-RL policy
        student = clone_model(teacher_ref)
        for p in student.parameters():
            p.requires_grad_(True)
    else:  # a wider model of the same family, warmed up by SFT (weak-to-strong)
        scfg = cfg.model.model_copy(update={"hidden_size": d.student_hidden_size})
        student, _ = build_model(scfg, tokenizer_corpus(), cfg.seed + 1)
        sft_train(student, sft_pairs(tok, train, cfg.seed + 1), steps=d.student_sft_steps,
                  batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, seed=cfg.seed + 1, pad_id=tok.pad_token_id)
    tasks = {c: make_task(c, cfg.task.rows, cfg.task.cols) for c in heldout}
    logger = MetricsLogger(run, cfg.tensorboard)
    own = pool is None
    pool = pool or EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox)
    try:
        cache = EvalCache(pool, tasks)
        judge = RLTrainer(cfg.rl, student, tok, cache, train, seed=cfg.seed, max_context=cfg.model.max_positions)
        before = heldout_eval(judge, cache, heldout, cfg)
        opt = torch.optim.AdamW(student.parameters(), lr=d.lr, weight_decay=0.0)
        engine = Engine(student, tok, max_batch_size=d.prompts_per_step * d.samples_per_prompt,
                        max_context=cfg.model.max_positions, seed=cfg.seed)
        student_ref = clone_model(student)
        kl_coef = d.kl_coef
        for step in range(d.steps):
            chains = [train[(step * d.prompts_per_step + i) % len(train)] for i in range(d.prompts_per_step)]
            params = SamplingParams(temperature=1.0, max_new_tokens=cfg.rl.max_new_tokens)
            reqs = [GenerationRequest(tuple(encode_prompt(tok, prompt_text(c))),
                                      params.replace(seed=cfg.seed * 7 + step * 1000 + i * 10 + j), f"{i}/{j}")
                    for i, c in enumerate(chains) for j in range(d.samples_per_prompt)]
            res = engine.generate(reqs)
            prompts, resp = [list(r.prompt_token_ids) for r in res], [list(r.token_ids) for r in res]
            with torch.no_grad():
                t_lp, _, mask = response_logprobs(teacher, prompts, resp, pad_id=tok.pad_token_id)
                r_lp, _, _ = response_logprobs(teacher_ref, prompts, resp, pad_id=tok.pad_token_id)
                old_lp, _, _ = response_logprobs(student, prompts, resp, pad_id=tok.pad_token_id)
                ref_lp, _, _ = response_logprobs(student_ref, prompts, resp, pad_id=tok.pad_token_id)
            token_rewards = opd_token_rewards(t_lp, r_lp, mask)
            mean_r = masked_mean(token_rewards, mask)
            if d.center:  # E[grad log pi(a_t)] = 0, so a constant baseline leaves the gradient unbiased
                token_rewards = torch.where(mask, token_rewards - mean_r, torch.zeros_like(token_rewards))
            adv = token_reward_direct_advantages(None, None, mask, token_rewards=token_rewards, token_coef=d.token_coef)
            student.train()
            lp, _, _ = response_logprobs(student, prompts, resp, pad_id=tok.pad_token_id)
            out = ppo_clip_loss(lp, old_lp, adv, mask)
            loss = out.loss + kl_coef * kl_loss(lp, ref_lp, mask, kind="k3") if kl_coef > 0 else out.loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.rl.max_grad_norm)
            opt.step()
            student.eval()
            engine.update_weights()
            logger.log("distill", step, {"opd_reward": float(mean_r), "loss": float(loss.detach()),
                                         "kl_coef": kl_coef, "response_length": float(mask.sum(-1).float().mean())})
            if d.adaptive:
                kl_coef = adaptive_kl_coef(kl_coef, mean_r, max_coef=10.0)
        judge.engine.update_weights()
        after = heldout_eval(judge, cache, heldout, cfg)
    finally:
        if own:
            pool.close()
    logger.close()
    save_weights(student, run / "student.safetensors")
    verdict = (f"Direct-OPD student held-out pass rate {before['pass_rate']:.3f} -> {after['pass_rate']:.3f} "
               f"(sampled {before.get('sampled_pass_rate', 0):.3f} -> {after.get('sampled_pass_rate', 0):.3f}), "
               f"fast_1 {before['fast_1']:.3f} -> {after['fast_1']:.3f}")
    summary = {"teacher": info, "before": before, "after": after, "verdict": verdict}
    (run / "distill.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary
