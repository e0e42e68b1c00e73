"""`kernelrl repro nki-agent`: NKI-Agent's two findings with a policy that learns, at CPU scale.

NKI-Agent adapts CUDA-Agent's compile-verify-fix loop to Trainium and reports (i) tool use is critical: a strong
model solved 6% of its tasks single-shot and 77% with the compile/verify tools; (ii) GRPO with a binary compile
reward does not improve over SFT, while an execution-based reward does.

Here the policy is the tiny model on the tiny NKI family (`kernelrl.train.nki_family`: elementwise chains and
row reductions as NKI kernels, judged by the gym's real ``nki`` backend through the real `EvalPool`). Per seed
(default 0, 1, 2) one SFT checkpoint: generated solutions of the train chains plus feedback-then-fix turns (a
first draft with one typical mistake, the gym's real verdict of it, the correct kernel), then from it:

(a) Held-out episodes with a budget of ``k = rl.turns`` gym calls each, at temperature 1: **compile-verify-fix**
    (each turn is one gym call, its verdict the next turn's feedback, stop at the first correct turn) vs
    **single-shot best-of-k** (k independent samples, solved when any is correct: the same number of gym calls)
    vs **no-information feedback** (the same loop, each turn's feedback drawn at random from real feedback of
    other failed drafts: it says "failed" and nothing else about this answer). Also pass@1 (one call).
(b) **GRPO with the binary compile reward vs the execution reward** (`rewards` ``compile`` vs ``binary``: 1 per
    kernel the gym ran and found correct; the gym times nothing here), both from the same SFT checkpoint (which
    compiles at a high rate) with the same seed and steps; held-out sampled pass rate and compile rate after RL.

Paired by seed, with 95% t-intervals and verdicts (`repro.stats`). Writes ``results.json`` (`repro.record`), then
``report.md`` and ``nki-agent.png`` from it alone (`repro.nki_agent_report`). The scripted `nki-draft` author is
not used here; it stays as a test double of the agent loop.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import torch

from kernelrl.evaluate import EvalPool, EvalResult
from kernelrl.generation import Engine
from kernelrl.repro.record import new_record, read_record, write_record
from kernelrl.repro.seeds import run_seeds
from kernelrl.repro.stats import paired
from kernelrl.rewards import get_reward
from kernelrl.train.config import TrainConfig, load_config
from kernelrl.train.job import load_weights, run_train, save_weights, seed_everything
from kernelrl.train.logs import read_metrics
from kernelrl.train.model import build_model
from kernelrl.train.nki_family import NkiChainFamily
from kernelrl.train.rollout import EvalCache, collect_episodes, judge_answers
from kernelrl.train.sft import sft_train
from kernelrl.train.task_family import make_family

#: (b): both arms from the seed's SFT checkpoint, same seed and steps; only the reward differs
REWARD_ARMS: dict[str, str] = {"compile": "compile", "execution": "binary"}
#: share of the train chains that also get a feedback-then-fix SFT pair
FIX_FRACTION = 0.5

_COMMON = ["threads=1", "checkpoint_every=0", "tensorboard=false", "progress=false", "task.family=tiny-nki",
           "model.vocab_size=512", "model.max_positions=320", "rl.algo=grpo", "rl.reward=binary", "rl.turns=3", "rl.max_new_tokens=72",
           "rl.dynamic_sampling=false", "eval.correctness_trials=1", "eval.measure_timing=false"]
#: the CPU-scale setting; `SMOKE` shrinks it to seconds
DEFAULT = [*_COMMON, "name=repro-nki-agent", "task.n_train=400", "task.n_heldout=32", "task.min_ops=1",
           "task.max_ops=2", "task.rows=256", "task.cols=64", "sft.steps=150", "sft.batch_size=32", "sft.lr=0.003",
           "rl.steps=20", "rl.prompts_per_step=4", "rl.group_size=8", "rl.lr=0.0002", "rl.kl_coef=0.05",
           "eval.workers=2", "eval.heldout_samples=4"]
SMOKE = [*_COMMON, "name=repro-nki-agent-smoke", "task.n_train=8", "task.n_heldout=2", "task.min_ops=1",
         "task.max_ops=1", "task.rows=128", "task.cols=16", "sft.steps=20", "sft.batch_size=8", "rl.steps=1",
         "rl.prompts_per_step=2", "rl.group_size=2", "eval.workers=1", "eval.heldout_samples=2"]


def repro_config(smoke: bool = False, overrides: list[str] | None = None) -> TrainConfig:
    """`DEFAULT` (or `SMOKE`) on the ``tiny-cpu`` preset, then `overrides`."""
    cfg = load_config("tiny-cpu", overrides=[*(SMOKE if smoke else DEFAULT), *(overrides or [])])
    if cfg.task.family != "tiny-nki":
        raise ValueError(f"repro nki-agent runs on task.family=tiny-nki, got {cfg.task.family}")
    if cfg.rl.turns < 2:
        raise ValueError(f"rl.turns is the gym-call budget k of (a) and must be >= 2, got {cfg.rl.turns}")
    if cfg.eval.heldout_samples < 2:
        raise ValueError(f"eval.heldout_samples must be >= 2 (sampled pass rates), got {cfg.eval.heldout_samples}")
    return cfg


# ----------------------------------------------------------------------------------- SFT with fix turns


def sft_checkpoint(cfg: TrainConfig, family: NkiChainFamily, cache: EvalCache, path: Path) -> tuple[Any, Any, dict[str, Any]]:
    """SFT on the train chains' solutions plus feedback-then-fix pairs for a `FIX_FRACTION` of them (first drafts
    judged by the gym); saves the weights to `path`. Returns (model, tokenizer, stats incl. the feedback pool)."""
    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    model, tok = build_model(cfg.model, family.tokenizer_corpus(), cfg.seed)
    items = list(family.train_items)
    fix_items = random.Random(cfg.seed + 3).sample(items, int(len(items) * FIX_FRACTION))
    single = family.sft_pairs(tok, items, cfg.seed)
    fixes, pool_texts = family.fix_pairs(tok, fix_items, cfg.seed, cache.submit)
    losses = sft_train(model, single + fixes, steps=cfg.sft.steps, batch_size=cfg.sft.batch_size, lr=cfg.sft.lr,
                       seed=cfg.seed, pad_id=tok.pad_token_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_weights(model, path)
    longest = max(len(p) + len(a) for p, a in single + fixes)
    return model.eval(), tok, {"single_pairs": len(single), "fix_pairs": len(fixes), "feedback_pool": pool_texts,
                               "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
                               "longest_pair_tokens": longest}


# ----------------------------------------------------------------------------------- (a) tools vs best-of-k


def _correct(r: EvalResult | None) -> bool:
    """A verdict that passed (None: the answer held no code)."""
    return r is not None and r.correct


def _compiled(r: EvalResult | None) -> float:
    return float(r is not None and get_reward("compile")(r) > 0)


def best_of_k(engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable], cfg: TrainConfig,
              episodes: int, k: int) -> dict[str, Any]:
    """Per (item, episode) k independent samples: solved when any is correct (k gym calls); pass@1 and compile
    rate over all samples; the resample-fix rate P(sample 2 correct | sample 1 wrong)."""
    res = [[s.result for s in per] for per in judge_answers(engine, tok, cache, items, samples=episodes * k,
                                                             max_new_tokens=cfg.rl.max_new_tokens, seed=cfg.seed + 101)]
    solved, first_wrong, second_ok = [], 0, 0
    for per in res:
        for e in range(episodes):
            draws = per[e * k:(e + 1) * k]
            solved.append(any(_correct(r) for r in draws))
            if not _correct(draws[0]):
                first_wrong += 1
                second_ok += _correct(draws[1])
    flat = [r for per in res for r in per]
    return {"solved": _mean(solved), "pass_at_1": _mean(_correct(r) for r in flat),
            "compile_rate": _mean(_compiled(r) for r in flat), "calls_mean": float(k),
            "second_try_fixes": second_ok / first_wrong if first_wrong else None, "first_wrong": first_wrong,
            "episodes": len(solved)}


def feedback_loop(engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable], cfg: TrainConfig,
                  episodes: int, k: int) -> dict[str, Any]:
    """Multi-turn episodes (k turns at most, one gym call each, stop at the first correct turn) with the feedback
    `cache.family` gives; solved rate, mean gym calls, and the second turn's fix rate after a wrong first turn."""
    samples = collect_episodes(engine, tok, cache, items, group_size=episodes, turns=k,
                               max_new_tokens=cfg.rl.max_new_tokens, seed=cfg.seed + 202, stop_at_first_correct=True)
    by_root: dict[str, list[Any]] = {}
    for s in samples:  # a later turn's request id starts with its episode's first request id
        by_root.setdefault(s.request_id.split("#")[0], []).append(s)
    runs = [sorted(v, key=lambda s: s.turn) for v in by_root.values()]
    wrong1 = [e for e in runs if not (e[0].result and e[0].result.correct)]
    fixed2 = [e for e in wrong1 if len(e) > 1 and e[1].result is not None and e[1].result.correct]
    return {"solved": _mean(any(s.result is not None and s.result.correct for s in e) for e in runs),
            "pass_at_1": _mean(bool(e[0].result and e[0].result.correct) for e in runs),
            "calls_mean": _mean(len(e) for e in runs), "episodes": len(runs),
            "second_try_fixes": len(fixed2) / len(wrong1) if wrong1 else None, "first_wrong": len(wrong1),
            "examples": [[s.text for s in e] for e in wrong1[:2]]}


# ----------------------------------------------------------------------------------- (b) compile vs execution


def heldout_rates(engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable], cfg: TrainConfig) -> dict[str, float]:
    """Held-out sampled pass and compile rates (`eval.heldout_samples` answers per item, temperature 1)."""
    res = [s.result for per in judge_answers(engine, tok, cache, items, samples=cfg.eval.heldout_samples,
                                             max_new_tokens=cfg.rl.max_new_tokens, seed=cfg.seed + 17) for s in per]
    return {"pass_rate": _mean(_correct(r) for r in res), "compile_rate": _mean(_compiled(r) for r in res),
            "n": float(len(res))}


def _engine(model: Any, tok: Any, cfg: TrainConfig, width: int) -> Engine:
    return Engine(model, tok, max_batch_size=width, max_context=cfg.model.max_positions, seed=cfg.seed)


def train_arm(cfg: TrainConfig, run_dir: Path, cache: EvalCache, sft_policy: Path, reward: str) -> dict[str, Any]:
    """Single-turn GRPO from the SFT checkpoint with `reward`; per-step curves and held-out rates after RL."""
    t0 = time.perf_counter()
    c = cfg.model_copy(deep=True)
    c.model.init_from, c.sft.steps, c.rl.reward, c.rl.turns = str(sft_policy), 0, reward, 1
    c.eval.heldout_samples = 1  # run_train's own held-out pass is greedy only; the sampled rates are ours
    run_train(c, run_dir=run_dir, echo=False, cache=cache, report=False)
    rows = read_metrics(run_dir, "rl")
    model, tok = build_model(cfg.model, cache.family.tokenizer_corpus(), cfg.seed)
    load_weights(model, run_dir / "policy.safetensors", "arm policy")
    items = list(cache.family.heldout_items)
    after = heldout_rates(_engine(model.eval(), tok, cfg, len(items) * cfg.eval.heldout_samples), tok, cache, items, cfg)
    return {"reward": reward, "after": after, "pass_rate": [r.get("rollout/pass_rate", 0.0) for r in rows],
            "reward_mean": [r.get("reward/mean", 0.0) for r in rows], "time_s": time.perf_counter() - t0}


# ----------------------------------------------------------------------------------- the whole repro


def run_seed(cfg: TrainConfig, out: Path, pool: EvalPool, say: Callable[[str], None]) -> dict[str, Any]:
    """One seed: the SFT checkpoint, (a) from it, (b) both reward arms from it."""
    t0 = time.perf_counter()
    family = make_family(cfg.task, cfg.seed)
    assert isinstance(family, NkiChainFamily)
    cache = EvalCache(pool, family)
    sft_path = out / "sft" / "sft_policy.safetensors"
    say(f"SFT ({cfg.sft.steps} steps, solutions + feedback-then-fix turns)")
    model, tok, sft = sft_checkpoint(cfg, family, cache, sft_path)
    items, k, n = list(family.heldout_items), cfg.rl.turns, cfg.eval.heldout_samples
    times = {"sft_s": time.perf_counter() - t0}
    engine = _engine(model, tok, cfg, len(items) * n * k)
    say(f"(a) {len(items)} held-out chains x {n} episodes, budget k = {k} gym calls")
    shuffled = EvalCache(pool, family.with_feedback("shuffled", sft["feedback_pool"]))
    tools = {"best_of_k": best_of_k(engine, tok, cache, items, cfg, n, k),
             "feedback": feedback_loop(engine, tok, cache, items, cfg, n, k),
             "no_info_feedback": feedback_loop(engine, tok, shuffled, items, cfg, n, k)}
    start = heldout_rates(engine, tok, cache, items, cfg)
    times["tools_s"] = time.perf_counter() - t0 - times["sft_s"]
    arms = {}
    for arm, reward in REWARD_ARMS.items():
        say(f"(b) GRPO arm {arm} (reward {reward}, {cfg.rl.steps} steps)")
        arms[arm] = train_arm(cfg, out / arm, cache, sft_path, reward)
        times[f"{arm}_s"] = arms[arm]["time_s"]
    sft["feedback_pool_size"] = len(sft.pop("feedback_pool"))
    return {"sft": {**sft, "heldout": start},
            "tools": tools, "rewards": arms, "times": times,
            "eval_cache": {"submitted": cache.submitted + shuffled.submitted, "hits": cache.hits + shuffled.hits}}


def comparisons(seeds: dict[str, Any]) -> dict[str, Any]:
    """The paired differences over seeds, each with its 95% interval and verdict (positive: the claim holds)."""
    def diff(f: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
        return paired([f(d) for d in seeds.values()])

    return {
        "feedback_vs_best_of_k": diff(lambda d: d["tools"]["feedback"]["solved"] - d["tools"]["best_of_k"]["solved"]),
        "feedback_vs_no_info": diff(lambda d: d["tools"]["feedback"]["solved"]
                                    - d["tools"]["no_info_feedback"]["solved"]),
        "feedback_vs_single_shot": diff(lambda d: d["tools"]["feedback"]["solved"]
                                        - d["tools"]["best_of_k"]["pass_at_1"]),
        "execution_vs_compile": diff(lambda d: d["rewards"]["execution"]["after"]["pass_rate"]
                                     - d["rewards"]["compile"]["after"]["pass_rate"]),
        "execution_vs_sft": diff(lambda d: d["rewards"]["execution"]["after"]["pass_rate"]
                                 - d["sft"]["heldout"]["pass_rate"]),
        "compile_vs_sft": diff(lambda d: d["rewards"]["compile"]["after"]["pass_rate"] - d["sft"]["heldout"]["pass_rate"]),
    }


def run_nki_agent(cfg: TrainConfig, out: str | Path, *, seeds: tuple[int, ...] = (0, 1, 2),
                  pool: EvalPool | None = None, echo: bool = True) -> dict[str, Any]:
    """Every seed, the paired comparisons; ``results.json``, then the report and plot rendered from it."""
    from kernelrl.repro.nki_agent_report import rewrite_report

    if not seeds:
        raise ValueError("at least one seed is needed")
    t_start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {**new_record("nki-agent", cfg.model_dump()), "seed_list": list(seeds),
                               "reward_arms": REWARD_ARMS, "fix_fraction": FIX_FRACTION, "seeds": {}, "times": {}}
    run_seeds("nki-agent", cfg, seeds, out, results, run_seed, pool=pool, echo=echo, started=t_start)
    results["comparisons"] = comparisons(results["seeds"])
    results["times"]["total_s"] = results["wall_s"] = time.perf_counter() - t_start
    write_record(out, results)
    rewrite_report(out)
    return read_record(out)


def _mean(values: Any) -> float:
    items = [float(v) for v in values]
    return sum(items) / len(items) if items else float("nan")
