"""Direct-OPD (weak-to-strong on-policy distillation), on the run's task family (tiny chains or a suite).

A weak teacher improved by RL (``pi_T``, a tiny-cpu run's final policy) and its pre-RL reference
(``pi_Tref``, the same run's SFT policy) score the student's own samples with the dense token reward
``log pi_T(a_t) - log pi_Tref(a_t)`` (`kernelrl.rl.opd_token_rewards`). The student maximises it under a
KL penalty to its own start ``pi_0`` placed *in the token reward* (`kernelrl.rl.opd_regularized_token_rewards`,
G-OPD, Yang et al. 2026, arXiv 2602.12125):

    r_t = token_coef * (log pi_T - log pi_Tref)(a_t) - kl_coef * (log pi - log pi_0)(a_t),

used directly as the per-token advantage (`token_reward_direct`: discount 0, each token credited with
its own reward, as in on-policy distillation, Agarwal et al. 2024). Its maximiser is
``pi ∝ pi_0 (pi_T / pi_Tref)^(token_coef / kl_coef)``: for a student that starts as a copy of
``pi_Tref`` and equal coefficients that is the teacher itself, and ``r_t`` is ``log pi_T - log pi``,
the sampled negative reverse KL to the teacher. `DistillConfig.kl_mode = "k3_loss"` keeps the earlier
k3 KL *loss* term, whose gradient is that of the forward ``KL(pi_0 || pi)`` and whose optimum
over-weights the tokens of largest teacher log-ratio (the held-out pass rate fell with it).

No gym call is needed to train; the gym judges the student (and the teacher, for comparison) on
held-out chains before and after. Running it again with another teacher pair on the result composes
shifts sequentially.
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from kernelrl.evaluate import EvalPool
from kernelrl.generation import Engine, GenerationRequest, SamplingParams
from kernelrl.rl import (
    adaptive_kl_coef,
    kl_exact,
    kl_loss,
    opd_regularized_token_rewards,
    opd_token_rewards,
    ppo_clip_loss,
    token_reward_direct_advantages,
)
from kernelrl.rl.masked import masked_mean
from kernelrl.train.config import DistillConfig, TrainConfig
from kernelrl.train.job import eval_config, heldout_eval, run_train, save_weights, seed_everything
from kernelrl.train.logprobs import response_distributions, response_logprobs
from kernelrl.train.logs import MetricsLogger, Progress
from kernelrl.train.model import build_model, clone_model
from kernelrl.train.rollout import EvalCache
from kernelrl.train.sft import sft_train
from kernelrl.train.task_family import TaskFamily, TinyFamily, make_family

Tokens = list[list[int]]


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
        run_train(tcfg, run_dir=teacher_dir, echo=False, pool=pool)
        info["teacher_train_s"] = time.perf_counter() - t0
    if (teacher_dir / "summary.json").is_file():  # the teacher run's own held-out numbers (its eval seeds)
        saved = json.loads((teacher_dir / "summary.json").read_text())
        info["teacher_run_heldout"] = {k: _numbers(saved[k]) for k in ("after_sft", "after_rl") if k in saved}
    teacher, tok = build_model(cfg.model, make_family(cfg.task, cfg.seed).tokenizer_corpus(), cfg.seed)
    teacher.load_state_dict(load_file(str(teacher_dir / "policy.safetensors")))
    ref = clone_model(teacher)
    ref.load_state_dict(load_file(str(teacher_dir / "sft_policy.safetensors")))
    return clone_model(teacher), ref, tok, info


def _numbers(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items() if isinstance(v, int | float)}


def sample_responses(engine: Engine, tok: Any, items: list[Hashable], *, samples: int, max_new_tokens: int,
                     seed: int, family: TaskFamily | None = None) -> tuple[Tokens, Tokens]:
    """(prompt ids, response ids) of `samples` draws per item at temperature 1 (the training
    log-probs are the untempered model's, so the sampler must be too), EOS kept in the response."""
    family = family or TinyFamily([], [])
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
    reqs = [GenerationRequest(tuple(family.prompt_ids(tok, c)), params.replace(seed=seed + 1000 * i + j),
                              f"{i}/{j}") for i, c in enumerate(items) for j in range(samples)]
    res = engine.generate(reqs)
    return [list(r.prompt_token_ids) for r in res], [list(r.token_ids) for r in res]


@torch.no_grad()
def kl_to_teacher(student: Any, teacher: Any, prompts: Tokens, responses: Tokens, *, pad_id: int) -> float:
    """Mean exact per-token ``KL(pi_S || pi_T)`` (full vocabulary) on the given (student-sampled) tokens."""
    s_all, _, mask = response_distributions(student, prompts, responses, pad_id=pad_id)
    t_all, _, _ = response_distributions(teacher, prompts, responses, pad_id=pad_id)
    return float(masked_mean(kl_exact(s_all, t_all, mask), mask))


def opd_step(student: Any, teacher: Any, teacher_ref: Any, anchor: Any, opt: torch.optim.Optimizer, prompts: Tokens,
             responses: Tokens, d: DistillConfig, *, kl_coef: float, pad_id: int, max_grad_norm: float = 1.0,
             ) -> dict[str, float]:
    """One Direct-OPD update on the student's own samples (see the module docstring); returns metrics.

    `anchor` is ``pi_0``, the frozen student start of the KL term. Metrics are measured on the batch
    before the update: ``kl_teacher`` is the exact per-token ``KL(pi_S || pi_T)``, ``kl_teacher_k1``
    its sampled estimate ``mean(log pi_S - log pi_T)``, ``kl_anchor`` the k1 estimate of ``KL(pi_S || pi_0)``,
    ``opd_reward`` the mean teacher log-ratio ``log pi_T - log pi_Tref`` of the sampled tokens.
    """
    with torch.no_grad():
        t_all, t_lp, mask = response_distributions(teacher, prompts, responses, pad_id=pad_id)
        r_lp, _, _ = response_logprobs(teacher_ref, prompts, responses, pad_id=pad_id)
        a_lp, _, _ = response_logprobs(anchor, prompts, responses, pad_id=pad_id)
    student.train()
    s_all, lp, _ = response_distributions(student, prompts, responses, pad_id=pad_id)
    opd = opd_token_rewards(t_lp, r_lp, mask)
    if d.kl_mode == "reward":
        rewards = opd_regularized_token_rewards(t_lp, r_lp, lp.detach(), a_lp, mask, reward_scale=d.token_coef,
                                                kl_coef=kl_coef)
    else:
        rewards = d.token_coef * opd
    if d.center:  # E_pi[grad log pi(a_t)] = 0, so a constant baseline leaves the gradient unbiased
        rewards = torch.where(mask, rewards - masked_mean(rewards, mask), torch.zeros_like(rewards))
    adv = token_reward_direct_advantages(None, None, mask, token_rewards=rewards)
    # one on-policy epoch: pi_old is the sampling policy, i.e. the student before this update (ratio 1)
    out = ppo_clip_loss(lp, lp.detach(), adv, mask)
    loss = out.loss
    if d.kl_mode == "k3_loss" and kl_coef > 0:
        loss = loss + kl_coef * kl_loss(lp, a_lp, mask, kind="k3")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(student.parameters(), max_grad_norm)
    opt.step()
    student.eval()
    with torch.no_grad():
        return {
            "opd_reward": float(masked_mean(opd, mask)),
            "kl_teacher": float(masked_mean(kl_exact(s_all.detach(), t_all, mask), mask)),
            "kl_teacher_k1": float(masked_mean(lp.detach() - t_lp, mask)),
            "kl_anchor": float(masked_mean(lp.detach() - a_lp, mask)),
            "loss": float(loss.detach()),
            "grad_norm": float(gn),
            "kl_coef": kl_coef,
            "response_length": float(mask.sum(-1).float().mean()),
        }


def run_distill(cfg: TrainConfig, pool: EvalPool | None = None) -> dict[str, Any]:
    """Teacher pair -> student -> held-out eval -> Direct-OPD steps -> held-out eval; ``distill.json``.

    The teacher is judged on the same held-out chains with the same eval seeds for comparison.
    `pool`: an existing evaluation pool (else one is started)."""
    t_start = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    run = Path(cfg.out_dir) / "distill"
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").unlink(missing_ok=True)
    cfg.save(run)
    teacher, teacher_ref, tok, info = teacher_pair(cfg, run, pool)
    seed_everything(cfg.seed + 1)
    d = cfg.distill
    pad = tok.pad_token_id or 0
    family = make_family(cfg.task, cfg.seed)
    train, heldout = family.train_items, family.heldout_items
    if d.student == "teacher_ref":  # the pair's shift applied to a copy of the pre-RL policy
        student = clone_model(teacher_ref)
        for p in student.parameters():
            p.requires_grad_(True)
    else:  # a wider model of the same family, warmed up by SFT (weak-to-strong)
        scfg = cfg.model.model_copy(update={"hidden_size": d.student_hidden_size})
        student, _ = build_model(scfg, family.tokenizer_corpus(), cfg.seed + 1)
        sft_train(student, family.sft_pairs(tok, train, cfg.seed + 1), steps=d.student_sft_steps,
                  batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, seed=cfg.seed + 1, pad_id=pad)
    student.eval()
    logger = MetricsLogger(run, cfg.tensorboard)
    own = pool is None
    pool = pool or EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox)
    batch = d.prompts_per_step * d.samples_per_prompt
    max_ctx, max_new = cfg.model.max_positions, cfg.rl.max_new_tokens
    engine = Engine(student, tok, max_batch_size=max(batch, 4 * len(heldout)), max_context=max_ctx, seed=cfg.seed)
    teacher_engine = Engine(teacher, tok, max_batch_size=4 * len(heldout), max_context=max_ctx, seed=cfg.seed)
    times: dict[str, float] = {}

    def judge(eng: Engine, model: Any) -> dict[str, Any]:
        out = heldout_eval(eng, tok, cache, heldout, cfg)
        hp, hr = sample_responses(eng, tok, heldout, samples=4, max_new_tokens=max_new, seed=cfg.seed + 23,
                                  family=family)
        out["kl_to_teacher"] = kl_to_teacher(model, teacher, hp, hr, pad_id=pad)
        return out

    cache = EvalCache(pool, family)
    try:
        t0 = time.perf_counter()
        teacher_eval = judge(teacher_engine, teacher)
        before = judge(engine, student)
        times["heldout_before_s"] = time.perf_counter() - t0
        opt = torch.optim.AdamW(student.parameters(), lr=d.lr, weight_decay=0.0)
        anchor = clone_model(student)
        kl_coef = d.kl_coef
        bar = Progress(d.steps, "Direct-OPD", cfg.progress)
        t0 = time.perf_counter()
        for step in range(d.steps):
            chains = [train[(step * d.prompts_per_step + i) % len(train)] for i in range(d.prompts_per_step)]
            prompts, resp = sample_responses(engine, tok, chains, samples=d.samples_per_prompt, max_new_tokens=max_new,
                                             seed=cfg.seed * 7 + step * 100_000, family=family)
            m = opd_step(student, teacher, teacher_ref, anchor, opt, prompts, resp, d, kl_coef=kl_coef, pad_id=pad,
                         max_grad_norm=cfg.rl.max_grad_norm)
            engine.update_weights()  # the engine shares the module: bump the version, drop stale KV
            logger.log("distill", step, m)
            bar.advance(f"KL(S||T) {m['kl_teacher']:.3f} opd {m['opd_reward']:.3f}")
            if d.adaptive:
                kl_coef = adaptive_kl_coef(kl_coef, m["opd_reward"], max_coef=10.0)
        bar.close()
        times["distill_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        after = judge(engine, student)
        times["heldout_after_s"] = time.perf_counter() - t0
    finally:
        if own:
            pool.close()
    logger.close()
    save_weights(student, run / "student.safetensors")
    times["total_s"] = time.perf_counter() - t_start
    summary = {"teacher": {**info, "heldout": teacher_eval}, "before": before, "after": after, "times": times,
               "verdict": verdict(before, after, teacher_eval)}
    (run / "distill.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def verdict(before: dict[str, Any], after: dict[str, Any], teacher: dict[str, Any]) -> str:
    """A table of the student's held-out numbers before and after Direct-OPD, with the teacher's."""
    cols = [("pass_rate", "greedy pass"), ("fast_1", "greedy fast_1"), ("sampled_pass_rate", "sampled pass"),
            ("sampled_fast_1", "sampled fast_1"), ("kl_to_teacher", "KL(S||T)")]
    cols = [(k, name) for k, name in cols if k in before]
    lines = ["Direct-OPD held-out (student before -> after; teacher)"]
    for k, name in cols:
        lines.append(f"  {name:<15} {before[k]:.3f} -> {after[k]:.3f}   teacher {teacher.get(k, float('nan')):.3f}")
    return "\n".join(lines)
