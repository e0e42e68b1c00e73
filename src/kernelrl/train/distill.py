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

`DistillConfig.token_reward = "topk"`: each of the student's top-K tokens per position is an action with
its own reward (`kernelrl.rl.opd_topk_rewards`, `opd_topk_clipped_loss`), the KL to ``pi_0`` entering each
candidate's reward as above. `DistillConfig.objective = "reverse_kl"` is the distillation baseline of the
Direct-OPD paper: reward ``log pi_T - log pi`` (the teacher's final policy itself, no ``pi_Tref``).

No gym call is needed to train; the gym judges the student (and the teacher, for comparison) on
held-out chains before and after. `DistillConfig.student_from` starts the student from an earlier run's
student (``kernelrl distill --student-from RUN``): with another teacher pair that composes shifts
sequentially; with the KL in the reward and lambda = beta, two shifts ``(T1, Tref)`` then ``(T2, T1)``
have the optimum ``pi_0 (T1 / Tref)(T2 / T1) = pi_0 T2 / Tref``, that of the one shift ``(T2, Tref)``.
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
    opd_topk_clipped_loss,
    opd_topk_rewards,
    ppo_clip_loss,
    token_reward_direct_advantages,
)
from kernelrl.rl.masked import masked_mean
from kernelrl.rl.opd import topk_candidates
from kernelrl.train.config import DistillConfig, ModelConfig, TrainConfig, load_config
from kernelrl.train.job import (
    eval_config,
    heldout_eval,
    load_weights,
    run_train,
    save_weights,
    seed_everything,
)
from kernelrl.train.logprobs import response_distributions
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
    ``opd_reward`` the mean teacher log-ratio ``log pi_T - log pi_Tref`` of the sampled tokens,
    ``token_reward`` the mean token reward the update used (before centring; top-K: weighted over candidates).
    """
    topk = d.token_reward == "topk"
    with torch.no_grad():
        t_all, t_lp, mask = response_distributions(teacher, prompts, responses, pad_id=pad_id)
        r_all, r_lp, _ = response_distributions(teacher_ref, prompts, responses, pad_id=pad_id)
        a_all, a_lp, _ = response_distributions(anchor, prompts, responses, pad_id=pad_id)
    student.train()
    s_all, lp, _ = response_distributions(student, prompts, responses, pad_id=pad_id)
    opd = opd_token_rewards(t_lp, r_lp, mask)
    if topk:
        loss, rewards = _topk_loss(s_all, t_all, r_all, a_all, mask, d, kl_coef)
    else:
        rewards = _sampled_rewards(t_lp, r_lp, lp.detach(), a_lp, mask, d, kl_coef)
        adv = token_reward_direct_advantages(None, None, mask, token_rewards=_center(rewards, mask) if d.center else rewards)
        # one on-policy epoch: pi_old is the sampling policy, i.e. the student before this update (ratio 1)
        loss = ppo_clip_loss(lp, lp.detach(), adv, mask).loss
        if d.kl_mode == "k3_loss" and kl_coef > 0 and d.objective == "direct_opd":
            loss = loss + kl_coef * kl_loss(lp, a_lp, mask, kind="k3")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(student.parameters(), max_grad_norm)
    opt.step()
    student.eval()
    with torch.no_grad():
        return {
            "opd_reward": float(masked_mean(opd, mask)),
            "token_reward": float(masked_mean(rewards, mask)),
            "kl_teacher": float(masked_mean(kl_exact(s_all.detach(), t_all, mask), mask)),
            "kl_teacher_k1": float(masked_mean(lp.detach() - t_lp, mask)),
            "kl_anchor": float(masked_mean(lp.detach() - a_lp, mask)),
            "loss": float(loss.detach()),
            "grad_norm": float(gn),
            "kl_coef": kl_coef,
            "response_length": float(mask.sum(-1).float().mean()),
        }


def _center(x: torch.Tensor, mask: torch.Tensor, mean_of: torch.Tensor | None = None) -> torch.Tensor:
    """`x` minus the batch mean (of `mean_of`, default `x`) over the response tokens; E_pi[grad log pi] = 0,
    so a constant baseline leaves the gradient unbiased."""
    m = masked_mean(x if mean_of is None else mean_of, mask)
    keep = mask if x.dim() == mask.dim() else mask.unsqueeze(-1)
    return torch.where(keep, x - m, torch.zeros_like(x))


def _sampled_rewards(t_lp: torch.Tensor, r_lp: torch.Tensor, lp: torch.Tensor, a_lp: torch.Tensor,
                     mask: torch.Tensor, d: DistillConfig, kl_coef: float) -> torch.Tensor:
    """Token rewards ``[B, T]`` of the sampled tokens (before centring): Direct-OPD (G-OPD Eq. 4-6 with kl_mode=reward) or
    the reverse-KL baseline ``log pi_T - log pi`` (`opd_token_rewards` with the student as the reference)."""
    if d.objective == "reverse_kl":
        return d.token_coef * opd_token_rewards(t_lp, lp, mask)
    if d.kl_mode == "reward":
        return opd_regularized_token_rewards(t_lp, r_lp, lp, a_lp, mask, reward_scale=d.token_coef, kl_coef=kl_coef)
    return d.token_coef * opd_token_rewards(t_lp, r_lp, mask)


def _topk_loss(s_all: torch.Tensor, t_all: torch.Tensor, r_all: torch.Tensor, a_all: torch.Tensor,
               mask: torch.Tensor, d: DistillConfig, kl_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, token rewards ``[B, T]`` before centring) of top-K Direct-OPD: the student's top-K candidates per position
    (`topk_candidates`), candidate v's advantage ``lambda (log pi_T - log pi_Tref)(v) - beta (log pi - log pi_0)(v)``
    (reverse_kl: ``lambda (log pi_T - log pi)(v)``), weights from `opd_topk_rewards`, one on-policy
    `opd_topk_clipped_loss` step."""
    ids, s_k = topk_candidates(s_all.detach(), d.topk)
    t_k, r_k, a_k = (x.gather(-1, ids) for x in (t_all, r_all, a_all))
    reverse = d.objective == "reverse_kl"
    tk = opd_topk_rewards(s_k, t_k, s_k if reverse else r_k, mask, weighting=d.topk_weighting)
    adv = d.token_coef * tk.deltas
    if not reverse:
        adv = adv - kl_coef * torch.where(mask.unsqueeze(-1), s_k - a_k, torch.zeros_like(s_k))
    rewards = (tk.weights * adv).sum(-1)
    if d.center:
        adv = _center(adv, mask, mean_of=rewards)
    lp_k = s_all.gather(-1, ids)
    out = opd_topk_clipped_loss(lp_k, lp_k.detach(), adv, tk.weights, mask, coef=1.0)
    return out.loss, rewards


def student_weights(run: str | Path) -> tuple[Path, ModelConfig]:
    """(weights, model config) of the student to start from, for `distill.student_from` = `run`: a distill
    run's student (``run/distill/`` or that directory itself), else a train run's final policy."""
    run = Path(run)
    for d in (run / "distill", run):
        if (d / "student.safetensors").is_file() and (d / "student_model.json").is_file():
            return d / "student.safetensors", ModelConfig.model_validate_json((d / "student_model.json").read_text())
    if (run / "policy.safetensors").is_file() and (run / "config.yaml").is_file():
        return run / "policy.safetensors", load_config(None, run / "config.yaml").model
    raise FileNotFoundError(f"distill.student_from: {run} holds no distilled student (distill/student.safetensors "
                            "+ student_model.json) and no train run's policy.safetensors + config.yaml")


def build_student(cfg: TrainConfig, teacher_ref: Any, tok: Any,
                  family: TaskFamily) -> tuple[Any, ModelConfig, dict[str, Any]]:
    """(student, its model config, info): from `distill.student_from`, a copy of `teacher_ref`, or a larger
    model of the same family trained by its own SFT (`distill.student` = ``wide``)."""
    d = cfg.distill
    if d.student_from:
        path, mcfg = student_weights(d.student_from)
        student, stok = build_model(mcfg, family.tokenizer_corpus(), cfg.seed + 1)
        if stok.get_vocab() != tok.get_vocab():
            raise ValueError(f"distill.student_from: {d.student_from}'s tokenizer differs from the teacher's")
        load_weights(student, path, "distill.student_from")
        info: dict[str, Any] = {"start": "from", "student_from": str(path)}
    elif d.student == "teacher_ref":  # the pair's shift applied to a copy of the pre-RL policy
        student, mcfg, info = clone_model(teacher_ref), cfg.model, {"start": "teacher_ref"}
    else:  # a larger model of the same family, warmed up by its own SFT (weak-to-strong)
        mcfg = cfg.model.model_copy(update={"hidden_size": d.student_hidden_size,
                                            "num_layers": d.student_num_layers or cfg.model.num_layers})
        student, _ = build_model(mcfg, family.tokenizer_corpus(), cfg.seed + 1)
        t0 = time.perf_counter()
        sft_train(student, family.sft_pairs(tok, family.train_items, cfg.seed + 1), steps=d.student_sft_steps,
                  batch_size=cfg.sft.batch_size, lr=d.student_sft_lr or cfg.sft.lr, seed=cfg.seed + 1,
                  pad_id=tok.pad_token_id or 0)
        info = {"start": "wide", "sft_s": time.perf_counter() - t0}
    for p in student.parameters():
        p.requires_grad_(True)
    info["model"] = mcfg.model_dump()
    info["parameters"] = sum(p.numel() for p in student.parameters())
    return student.eval(), mcfg, info


def run_distill(cfg: TrainConfig, pool: EvalPool | None = None, cache: EvalCache | None = None) -> dict[str, Any]:
    """Teacher pair -> student -> held-out eval -> Direct-OPD steps -> held-out eval; ``distill.json``.

    The teacher is judged on the same held-out chains with the same eval seeds for comparison.
    `pool`: an existing evaluation pool (else one is started); `cache`: an `EvalCache` over the run's
    task family shared with other runs (then `pool` is unused)."""
    t_start = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    run = Path(cfg.out_dir) / "distill"
    run.mkdir(parents=True, exist_ok=True)
    cfg.save(run)
    teacher, teacher_ref, tok, info = teacher_pair(cfg, run, pool)
    seed_everything(cfg.seed + 1)
    d = cfg.distill
    pad = tok.pad_token_id or 0
    family = make_family(cfg.task, cfg.seed)
    train, heldout = family.train_items, family.heldout_items
    student, student_cfg, student_info = build_student(cfg, teacher_ref, tok, family)
    logger = MetricsLogger(run, cfg.tensorboard, fresh=True)
    own = pool is None and cache is None
    if own:
        pool = EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox)
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

    if cache is None:
        cache = EvalCache(pool, family)  # type: ignore[arg-type]
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
        if own and pool is not None:
            pool.close()
    logger.close()
    save_weights(student, run / "student.safetensors")
    (run / "student_model.json").write_text(student_cfg.model_dump_json(indent=1))
    times["total_s"] = time.perf_counter() - t_start
    summary = {"teacher": {**info, "heldout": teacher_eval}, "student": student_info, "before": before,
               "after": after, "objective": d.objective, "token_reward": d.token_reward, "times": times,
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
