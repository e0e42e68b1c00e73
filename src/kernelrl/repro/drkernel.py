"""`kernelrl repro drkernel`: Dr. Kernel's findings (Liu et al. 2025, "Dr. Kernel: Reinforcement Learning Done
Right for Triton Kernel Generations") at CPU scale on the tiny family in hybrid mode (`task.hybrid`: an answer
may leave ops to PyTorch; the gym runs with ``torch_ops="allow"`` and records the time-based profiling coverage).

GRPO vs TRLOO (the finding under test): for each seed (default 0, 1, 2), one SFT checkpoint, then a GRPO arm
    and a TRLOO arm from it (same seed, reward `speedup`, PRS off, same steps). The held-out `METRIC` after RL
    is paired by seed: the mean of TRLOO - GRPO with a 95% t-interval and a verdict (`kernelrl.repro.stats`).
(a) Lazy optimisation, on the first `lazy_seeds` seeds (default 3) for `lazy_steps` RL steps (default
    `LAZY_STEPS`): the share of correct turns whose coverage is below 0.5 (`rollout/lazy_share`), without PR /
    PRS and with them, from the seed's SFT checkpoint at a matched reward scale: the baseline's reward is PR's
    less its profiling term (``1 + min(s, 3)``), PR + PRS's is ``1 + min(s, 3) + coverage`` with PRS per turn
    (keep p = clip((c - 0.3) / 0.1, 0, 1)). Paired by seed: the second-half lazy share, baseline minus PR + PRS.
On the first seed's policies:
(b) A demonstration, not a finding: the own-reward weight ``dA_i/dr_i`` of the group-mean baseline is
    ``(n-1)/n`` for any data (``A_i = G_i - mean_j G_j``; 0 for a group of one), TRLOO's leave-one-out
    baseline gives 1; computed on real rollouts' returns analytically and by autograd through the
    `kernelrl.rl` estimators (``drgrpo``, ``grpo`` with std normalisation, ``trloo``).
(c) Sequential test-time scaling: held-out episodes run to the turn limit (``stop_at_first_correct=False``);
    fast_1 of the best turn of each episode vs fast_1 of its last turn, and both per turn budget. On every seed
    the `TEST_TIME_ARM` policy's too, paired by seed: the answer's fast_1 after the last turn minus after the
    first (`refinement_comparison`; best-of-turns can only grow with the budget, so it is shown, not tested).
    SFT holds feedback-then-fix turns (a wrong draft, its verdict, ``fix:``, a solution) and feedback-then-faster
    turns (a correct, often lazy draft, its verdict with its speedup, ``faster:``, an all-C solution), so a later
    turn follows either cue it meets in RL (`task_family.warmup_pairs`).

Writes ``results.json`` (`kernelrl.repro.record`: revision, config, every seed's numbers, wall time), then
``report.md`` and ``drkernel.png`` rendered from it alone, under the run directory (each seed's runs in
``seed<N>/``). If an effect does not appear at this scale the report says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernelrl.evaluate import EvalPool
from kernelrl.generation import Engine
from kernelrl.repro.record import new_record, read_record, write_record
from kernelrl.repro.stats import paired, verdict_line
from kernelrl.rewards import coverage, get_reward
from kernelrl.rl import ADVANTAGE_ESTIMATORS, episode_returns
from kernelrl.train.config import TrainConfig, load_config
from kernelrl.train.job import eval_config, run_train
from kernelrl.train.logs import read_metrics
from kernelrl.train.model import build_model
from kernelrl.train.rollout import EvalCache, Sample
from kernelrl.train.rollout import collect_episodes as collect
from kernelrl.train.task_family import TaskFamily, make_family

#: GRPO vs TRLOO: both from each seed's SFT checkpoint, same seed, reward `speedup`, PRS off
ALGO_ARMS: dict[str, dict[str, Any]] = {
    "grpo": {"algo": "grpo", "reward": "speedup", "prs": "off"},
    "trloo": {"algo": "trloo", "reward": "speedup", "prs": "off"},
}
#: (a) lazy optimisation: without PR / PRS and with them, at one reward scale (the baseline: PR less coverage)
ARMS: dict[str, dict[str, Any]] = {
    "baseline": {"algo": "trloo", "reward": "coverage", "reward_options": {"coverage_weight": 0.0}, "prs": "off"},
    "pr_prs": {"algo": "trloo", "reward": "coverage", "reward_options": {}, "prs": "per_turn"},  # Dr. Kernel's PR + PRS
}
#: RL steps of the lazy-optimisation arms in a full run (the GRPO / TRLOO arms take `rl.steps`)
LAZY_STEPS = 30
#: (c) on every seed: the held-out sequential scaling of this arm's policy (Dr. Kernel's TRLOO)
TEST_TIME_ARM = "trloo"
#: the held-out number the GRPO / TRLOO comparison is judged on (correctness only: no timing noise)
METRIC = "sampled_pass_rate"

#: the default CPU-scale setting (about 10 minutes on 2 cores); `smoke=True` shrinks it to seconds
DEFAULT = [
    "name=repro-drkernel", "threads=1", "checkpoint_every=0", "tensorboard=false", "progress=false",
    "task.hybrid=true", "task.lazy_fraction=0.5", "task.n_train=256", "task.n_heldout=16", "task.min_ops=3",
    "task.max_ops=4", "task.rows=2048", "task.cols=1024",
    "sft.steps=200", "sft.fix_fraction=0.5", "sft.faster_fraction=0.5",
    "rl.algo=trloo", "rl.turns=2", "rl.stop_at_first_correct=false", "rl.steps=8", "rl.prompts_per_step=4",
    "rl.group_size=4", "rl.max_new_tokens=64", "rl.lr=0.0002", "rl.kl_coef=0.05", "rl.dynamic_sampling=false",
    "eval.workers=2", "eval.correctness_trials=1", "eval.timing_trials=20", "eval.timing_budget_s=0.5",
    "eval.heldout_samples=4",
]
SMOKE = [
    "name=repro-drkernel-smoke", "threads=1", "checkpoint_every=0", "tensorboard=false", "progress=false",
    "task.hybrid=true", "task.lazy_fraction=0.5", "task.n_train=8", "task.n_heldout=2", "task.min_ops=2",
    "task.max_ops=2", "task.rows=64", "task.cols=256",
    "sft.steps=30", "sft.fix_fraction=0.5", "sft.faster_fraction=0.5", "rl.algo=trloo", "rl.turns=2", "rl.stop_at_first_correct=false", "rl.steps=2",
    "rl.prompts_per_step=2", "rl.group_size=2", "rl.max_new_tokens=24", "rl.dynamic_sampling=false",
    "eval.workers=1", "eval.correctness_trials=1", "eval.timing_trials=2", "eval.timing_budget_s=0.05",
    "eval.heldout_samples=2",
]


def repro_config(smoke: bool = False, overrides: list[str] | None = None) -> TrainConfig:
    """The repro's base config (`DEFAULT` on the ``tiny-cpu`` preset, or `SMOKE` on ``smoke``), then `overrides`."""
    return load_config("smoke" if smoke else "tiny-cpu", overrides=[*(SMOKE if smoke else DEFAULT), *(overrides or [])])


# ----------------------------------------------------------------------------------- (b) self-inclusion


def self_inclusion_weights(rewards: torch.Tensor, prompt_ids: torch.Tensor, episode_ids: torch.Tensor,
                           turn_index: torch.Tensor, gamma: float = 1.0) -> dict[str, Any]:
    """The weight of each turn's own reward in its advantage, ``dA_i/dr_i``, per turn index.

    ``analytic_grpo``: ``(n-1)/n`` with n the size of the turn's (prompt, turn) group (group-mean baseline
    on the returns ``G``; 0 for a group of one); ``drgrpo`` / ``grpo`` / ``trloo``: the diagonal of the
    Jacobian of the registered estimators' advantages with respect to the rewards (GRPO variants on the
    returns, grouped by (prompt, turn), as TRLOO groups them). Also ``ratio``: the least-squares slope of
    drgrpo's advantage on TRLOO's over groups of two or more (``(n-1)/n`` when all groups have size n).
    All tensors ``[N]``, one entry per turn.
    """
    n_rows = rewards.numel()
    mask = torch.ones(n_rows, 1, dtype=torch.bool)
    span = int(turn_index.max()) + 1 if n_rows else 1
    group_turn = prompt_ids * span + turn_index

    def grpo_on_returns(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
        def f(r: torch.Tensor) -> torch.Tensor:
            g = episode_returns(r, episode_ids, turn_index, gamma)
            return ADVANTAGE_ESTIMATORS.get(name)(g, group_turn, mask)[:, 0]
        return f

    def trloo(r: torch.Tensor) -> torch.Tensor:
        return ADVANTAGE_ESTIMATORS.get("trloo")(r, prompt_ids, mask, turn_index=turn_index,
                                                 episode_ids=episode_ids, gamma=gamma)[:, 0]

    fns = {"drgrpo": grpo_on_returns("drgrpo"), "grpo": grpo_on_returns("grpo"), "trloo": trloo}
    r = rewards.detach().double()
    # a group whose returns all agree: GRPO's advantage is 0 there (std guard), so its weight is 0, not 0/0
    diag = {k: torch.nan_to_num(torch.autograd.functional.jacobian(f, r).diagonal(), nan=0.0) for k, f in fns.items()}
    _, inverse, counts = torch.unique(group_turn, return_inverse=True, return_counts=True)
    size = counts[inverse].double()
    analytic = (size - 1) / size
    out: dict[str, Any] = {"per_turn": {}}
    a_dr, a_tr = fns["drgrpo"](r), fns["trloo"](r)
    for t in sorted(set(turn_index.tolist())):
        sel = turn_index == t
        multi = sel & (size > 1)
        den = float((a_tr[multi] ** 2).sum())
        out["per_turn"][int(t)] = {
            "turns": int(sel.sum()), "mean_group_size": float(size[sel].mean()),
            "singleton_share": float((size[sel] == 1).double().mean()),
            "analytic_grpo": float(analytic[sel].mean()),
            **{k: float(v[sel].mean()) for k, v in diag.items()},
            "ratio_drgrpo_to_trloo": float((a_dr[multi] * a_tr[multi]).sum()) / den if den > 0 else None,
            "mean_return": float(episode_returns(r, episode_ids, turn_index, gamma)[sel].mean()),
        }
    out["all"] = {"analytic_grpo": float(analytic.mean()), **{k: float(v.mean()) for k, v in diag.items()},
                  "turns": n_rows}
    return out


def _tensors(samples: list[Sample]) -> tuple[torch.Tensor, ...]:
    roots: dict[tuple[int, int], int] = {}  # (group, episode): an episode's turns share it
    episodes = [roots.setdefault((s.group, s.episode), len(roots)) for s in samples]
    return (torch.tensor([s.reward for s in samples], dtype=torch.float64), torch.tensor([s.group for s in samples]),
            torch.tensor(episodes), torch.tensor([s.turn for s in samples]))


# ----------------------------------------------------------------------------------- (c) test-time scaling


def _fast(s: Sample) -> bool:
    return s.result is not None and s.result.correct and (s.result.speedup or 0.0) > 1.0


def sequential_scaling(samples: list[Sample], turns: int) -> dict[str, Any]:
    """fast_1 of each episode's last turn vs its best turn (any turn correct and faster than eager), overall
    and for each turn budget k (episodes cut after k turns); pass rates likewise."""
    episodes: dict[tuple[int, int], list[Sample]] = {}
    for s in samples:
        episodes.setdefault((s.group, s.episode), []).append(s)
    eps = [sorted(v, key=lambda s: s.turn) for v in episodes.values()]
    n = max(1, len(eps))

    def ok(s: Sample) -> bool:
        return s.result is not None and s.result.correct

    per_k = []
    for k in range(1, turns + 1):
        cut = [e[:k] for e in eps]
        per_k.append({"turns": k, "last_fast_1": sum(_fast(e[-1]) for e in cut) / n,
                      "best_fast_1": sum(any(_fast(s) for s in e) for e in cut) / n,
                      "last_pass": sum(ok(e[-1]) for e in cut) / n, "best_pass": sum(any(ok(s) for s in e) for e in cut) / n})
    return {"episodes": len(eps), "mean_turns": sum(len(e) for e in eps) / n, "per_budget": per_k,
            "last_fast_1": per_k[-1]["last_fast_1"], "best_fast_1": per_k[-1]["best_fast_1"]}


# ----------------------------------------------------------------------------------- the whole repro


def _load_policy(cfg: TrainConfig, family: TaskFamily, path: Path) -> tuple[Any, Any]:
    from safetensors.torch import load_file

    model, tok = build_model(cfg.model, family.tokenizer_corpus(), cfg.seed)
    model.load_state_dict(load_file(str(path)))
    return model.eval(), tok


def _heldout(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items() if isinstance(v, int | float)}


def _train_arm(cfg: TrainConfig, run_dir: Path, cache: EvalCache, sft_policy: Path, opts: dict[str, Any]) -> dict[str, Any]:
    """RL from the seed's SFT checkpoint with `opts` (algo, reward, prs); its curves and held-out numbers."""
    t0 = time.perf_counter()
    c = cfg.model_copy(deep=True)
    c.model.init_from, c.sft.steps = str(sft_policy), 0
    c.rl.algo, c.rl.reward, c.rl.prs = opts["algo"], opts["reward"], opts["prs"]
    c.rl.reward_options, c.rl.steps = dict(opts.get("reward_options", {})), opts.get("steps", c.rl.steps)
    summary = run_train(c, run_dir=run_dir, echo=False, cache=cache, report=False)
    rows = read_metrics(run_dir, "rl")
    return {
        "lazy_share": [r.get("rollout/lazy_share", 0.0) for r in rows],
        "coverage_mean": [r.get("rollout/coverage_mean", 0.0) for r in rows],
        "correct_turns": [r.get("rollout/correct_turns", 0.0) for r in rows],
        "pass_rate": [r.get("rollout/pass_rate", 0.0) for r in rows],
        "reward_mean": [r.get("reward/mean", 0.0) for r in rows],
        "prs_rejected": [r.get("prs/rejected_fraction", 0.0) for r in rows],
        "heldout_after_sft": _heldout(summary["after_sft"]), "heldout_after_rl": _heldout(summary["after_rl"]),
        "time_s": time.perf_counter() - t0,
    }


def run_seed(cfg: TrainConfig, out: Path, pool: EvalPool, *, lazy: bool, say: Callable[[str], None],
             lazy_steps: int | None = None, heldout_episodes: int = 4, heldout_turns: int = 3) -> dict[str, Any]:
    """One seed: SFT once, then every arm of `ALGO_ARMS` (and of `ARMS`, for `lazy_steps` steps, when `lazy`)
    from that checkpoint; then (c) on the `TEST_TIME_ARM` policy."""
    out.mkdir(parents=True, exist_ok=True)
    cache = EvalCache(pool, make_family(cfg.task, cfg.seed))  # equal answers share one verdict across arms
    t0 = time.perf_counter()
    scfg = cfg.model_copy(deep=True)
    scfg.rl.steps = 0
    say(f"SFT ({cfg.sft.steps} steps), the starting checkpoint of every arm")
    sft = run_train(scfg, run_dir=out / "sft", echo=False, cache=cache, report=False)
    res: dict[str, Any] = {"sft": _heldout(sft["after_sft"]), "arms": {}, "times": {"sft_s": time.perf_counter() - t0}}
    lazy_arms = {k: {**v, "steps": lazy_steps or cfg.rl.steps} for k, v in ARMS.items()} if lazy else {}
    arms = {**ALGO_ARMS, **lazy_arms}
    for arm, opts in arms.items():
        say(f"arm {arm} ({opts['algo']}, reward {opts['reward']} {opts.get('reward_options', {})}, PRS {opts['prs']}, "
            f"{opts.get('steps', cfg.rl.steps)} RL steps)")
        res["arms"][arm] = _train_arm(cfg, out / arm, cache, out / "sft" / "sft_policy.safetensors", opts)
        res["times"][f"{arm}_s"] = res["arms"][arm]["time_s"]
    t0 = time.perf_counter()
    say(f"(c) held-out sequential scaling of the {TEST_TIME_ARM} policy over {heldout_turns} turns")
    res["test_time"] = test_time_scaling(cfg, cache.family, cache, out / TEST_TIME_ARM / "policy.safetensors",
                                         heldout_episodes=heldout_episodes, heldout_turns=heldout_turns)
    res["times"]["test_time_s"] = time.perf_counter() - t0
    res["eval_cache"] = {"submitted": cache.submitted, "hits": cache.hits}
    return res


def _probe(cfg: TrainConfig, family: TaskFamily, cache: EvalCache, policy: Path, reward_name: str, *,
           probe_batches: int, heldout_episodes: int, heldout_turns: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(b) the own-reward weights on this policy's multi-turn returns and (c) its held-out sequential scaling."""
    model, tok = _load_policy(cfg, family, policy)
    turns = max(cfg.rl.turns, heldout_turns)
    width = max(cfg.rl.group_size * cfg.rl.prompts_per_step * probe_batches, heldout_episodes * len(family.heldout_items))
    engine = Engine(model, tok, max_batch_size=width, max_context=cfg.model.max_positions, seed=cfg.seed)
    reward = get_reward(reward_name)
    items = family.train_items[: cfg.rl.prompts_per_step * probe_batches]
    probe: dict[str, Any] = {}
    for stop in (True, False):
        samples = collect(engine, tok, cache, items, group_size=cfg.rl.group_size, turns=turns,
                          max_new_tokens=cfg.rl.max_new_tokens, seed=cfg.seed + 31, stop_at_first_correct=stop)
        for s in samples:
            s.reward = float(reward(s.result)) if s.result is not None else 0.0
        probe["stop_at_first_correct" if stop else "to_turn_limit"] = self_inclusion_weights(
            *_tensors(samples), gamma=cfg.rl.gamma)
    return probe, _held_out_scaling(cfg, family, cache, engine, tok, heldout_episodes, turns)


def _held_out_scaling(cfg: TrainConfig, family: TaskFamily, cache: EvalCache, engine: Engine, tok: Any,
                      heldout_episodes: int, turns: int) -> dict[str, Any]:
    """(c) held-out episodes run to the turn limit: `sequential_scaling` and the lazy share of correct turns."""
    samples = collect(engine, tok, cache, list(family.heldout_items), group_size=heldout_episodes, turns=turns,
                      max_new_tokens=cfg.rl.max_new_tokens, seed=cfg.seed + 77, stop_at_first_correct=False)
    scaling = sequential_scaling(samples, turns)
    ok = [coverage(s.result) for s in samples if s.result is not None and s.result.correct]
    scaling["lazy_share"] = sum(c < 0.5 for c in ok) / len(ok) if ok else 0.0
    return scaling


def test_time_scaling(cfg: TrainConfig, family: TaskFamily, cache: EvalCache, policy: Path, *,
                      heldout_episodes: int, heldout_turns: int) -> dict[str, Any]:
    """(c) on one seed's policy: its held-out sequential scaling over `heldout_turns` turns."""
    model, tok = _load_policy(cfg, family, policy)
    turns = max(cfg.rl.turns, heldout_turns)
    engine = Engine(model, tok, max_batch_size=heldout_episodes * len(family.heldout_items),
                    max_context=cfg.model.max_positions, seed=cfg.seed)
    return _held_out_scaling(cfg, family, cache, engine, tok, heldout_episodes, turns)


def refinement_comparison(seeds: dict[str, Any]) -> dict[str, Any]:
    """(c) paired by seed on the TRLOO policy: held-out fast_1 of the episode's answer after the last turn minus
    after its first (positive: feedback turns, `fix:` and `faster:`, improve the answer), beside best-of-turns fast_1."""
    rows = {s: d["test_time"]["per_budget"] for s, d in seeds.items() if d.get("test_time")}
    diffs = [per[-1]["last_fast_1"] - per[0]["last_fast_1"] for per in rows.values()]
    per_seed = {s: {"first_turn": per[0]["last_fast_1"], "last_turn": per[-1]["last_fast_1"],
                    "best_of_turns": per[-1]["best_fast_1"]} for s, per in rows.items()}
    return {"arm": TEST_TIME_ARM, "per_seed": per_seed, **paired(diffs)}


def algo_comparison(seeds: dict[str, Any], metric: str = METRIC) -> dict[str, Any]:
    """TRLOO minus GRPO on the held-out `metric` after RL, paired by seed, with its interval and verdict."""
    rows = {s: d["arms"] for s, d in seeds.items()}
    diffs = [a["trloo"]["heldout_after_rl"][metric] - a["grpo"]["heldout_after_rl"][metric] for a in rows.values()]
    out = {"metric": metric, "per_seed": {s: {arm: a[arm]["heldout_after_rl"][metric] for arm in ALGO_ARMS}
                                          for s, a in rows.items()}, **paired(diffs)}
    out["same_start"] = all(a["trloo"]["heldout_after_sft"] == a["grpo"]["heldout_after_sft"] for a in rows.values())
    return out


def lazy_comparison(seeds: dict[str, Any], lazy_seeds: list[int]) -> dict[str, Any]:
    """Second-half pooled lazy share, baseline minus PR + PRS, paired over `lazy_seeds` (positive: PR + PRS is
    less lazy), with each seed's halves."""
    halves = {str(s): {arm: pooled_halves(seeds[str(s)]["arms"][arm]) for arm in ARMS} for s in lazy_seeds}
    diffs = [h["baseline"][1] - h["pr_prs"][1] for h in halves.values()
             if h["baseline"][1] is not None and h["pr_prs"][1] is not None]
    return {"per_seed": halves, **paired(diffs)}


def run_drkernel(cfg: TrainConfig, out: str | Path, *, seeds: tuple[int, ...] = (0, 1, 2), pool: EvalPool | None = None,
                 echo: bool = True, probe_batches: int = 2, heldout_episodes: int = 4,
                 heldout_turns: int = 3, lazy_seeds: int = 3, lazy_steps: int | None = None) -> dict[str, Any]:
    """Every seed's arms (the lazy-optimisation arms on the first `lazy_seeds` seeds, for `lazy_steps` steps; None:
    `rl.steps`), then (b)-(c) on the first seed's policies; ``results.json``, the plot and the report (rendered
    from ``results.json``) under `out`. Returns the results."""
    if METRIC.startswith("sampled_") and cfg.eval.heldout_samples < 2:
        raise ValueError(f"GRPO vs TRLOO is judged on held-out {METRIC}: eval.heldout_samples must be >= 2, "
                         f"got {cfg.eval.heldout_samples}")
    if not seeds:
        raise ValueError("at least one seed is needed")
    t_start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    own_pool = pool is None
    pool = pool or EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox)
    results: dict[str, Any] = {**new_record("drkernel", cfg.model_dump()), "seed_list": list(seeds),
                               "algo_arms": ALGO_ARMS, "arms": ARMS, "metric": METRIC, "seeds": {},
                               "lazy_seeds": list(seeds[:lazy_seeds]), "lazy_steps": lazy_steps or cfg.rl.steps,
                               "lazy": {}, "self_inclusion": {}, "test_time": {}, "times": {}}

    try:
        for i, seed in enumerate(seeds):
            c = cfg.model_copy(deep=True)
            c.seed = seed

            def say(msg: str, seed: int = seed) -> None:
                if echo:
                    print(f"[repro drkernel {time.perf_counter() - t_start:6.0f}s] seed {seed}: {msg}", flush=True)

            t0 = time.perf_counter()
            results["seeds"][str(seed)] = run_seed(c, out / f"seed{seed}", pool, lazy=i < lazy_seeds, say=say,
                                                   lazy_steps=lazy_steps, heldout_episodes=heldout_episodes,
                                                   heldout_turns=heldout_turns)
            results["times"][f"seed{seed}_s"] = time.perf_counter() - t0
            write_record(out, results)  # the seeds so far
        first = seeds[0]
        c = cfg.model_copy(deep=True)
        c.seed = first
        family = make_family(c.task, first)
        cache = EvalCache(pool, family)
        arms = results["seeds"][str(first)]["arms"]
        for arm, opts in ARMS.items():
            trained = opts.get("same_as", arm)
            results["lazy"][arm] = arms[trained]
            t0 = time.perf_counter()
            say(f"(b) and (c): multi-turn returns and held-out sequential scaling of arm {arm}", first)
            results["self_inclusion"][arm], results["test_time"][arm] = _probe(
                c, family, cache, out / f"seed{first}" / trained / "policy.safetensors",
                ARMS[arm]["reward"], probe_batches=probe_batches, heldout_episodes=heldout_episodes,
                heldout_turns=heldout_turns)
            results["times"][f"probe_{arm}_s"] = time.perf_counter() - t0
        results["lazy_halves"] = {arm: pooled_halves(d) for arm, d in results["lazy"].items()}
        results["lazy_comparison"] = lazy_comparison(results["seeds"], results["lazy_seeds"])
        results["algo_comparison"] = algo_comparison(results["seeds"])
        results["refinement_comparison"] = refinement_comparison(results["seeds"])
        results["times"]["total_s"] = results["wall_s"] = time.perf_counter() - t_start
        results["eval_cache"] = {"submitted": cache.submitted, "hits": cache.hits}
        write_record(out, results)
        rewrite_report(out)
        say(f"done: {out / 'report.md'}", first)
        return results
    finally:
        if own_pool:
            pool.close()


def rewrite_report(out: str | Path) -> None:
    """Render ``report.md`` and ``drkernel.png`` from a run's ``results.json`` alone (no training, no gym)."""
    out = Path(out)
    results = read_record(out)
    plot(results, out / "drkernel.png")
    (out / "report.md").write_text(report(results))


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    a = results["algo_comparison"]
    ax = axes[3]
    for i, arm in enumerate(ALGO_ARMS):
        ax.scatter([i] * len(a["per_seed"]), [row[arm] for row in a["per_seed"].values()], color="black", s=12)
    for row in a["per_seed"].values():
        ax.plot([0, 1], [row[arm] for arm in ALGO_ARMS], color="#888888", linewidth=1)
    ax.set_xticks(range(len(ALGO_ARMS)), list(ALGO_ARMS))
    ax.set(title=f"GRPO vs TRLOO: held-out {a['metric']} per seed ({a['verdict']})", ylim=(-0.05, 1.05))
    ax = axes[0]
    for arm, d in results["lazy"].items():
        ax.plot(range(1, len(d["lazy_share"]) + 1), d["lazy_share"], marker="o", label=arm)
    ax.set(title="(a) lazy share of correct turns (coverage < 0.5)", xlabel="RL step", ylim=(-0.05, 1.05))
    ax.legend()
    ax = axes[1]
    probe = next(iter(results["self_inclusion"].values()))["to_turn_limit"]["per_turn"]
    turns = sorted(probe)
    width = 0.2
    for j, key in enumerate(("analytic_grpo", "drgrpo", "grpo", "trloo")):
        ax.bar([int(t) + (j - 1.5) * width for t in turns], [probe[t][key] for t in turns], width, label=key)
    ax.set(title="(b) weight of a turn's own reward dA_i/dr_i", xlabel="turn")
    ax.legend(fontsize=8)
    ax = axes[2]
    for arm, d in results["test_time"].items():
        ks = [p["turns"] for p in d["per_budget"]]
        ax.plot(ks, [p["best_fast_1"] for p in d["per_budget"]], marker="o", label=f"{arm} best-of-turns")
        ax.plot(ks, [p["last_fast_1"] for p in d["per_budget"]], marker="x", linestyle="--", label=f"{arm} last turn")
    ax.set(title="(c) held-out fast_1 vs turn budget", xlabel="turns", ylim=(-0.05, 1.05))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def pooled_halves(d: dict[str, Any]) -> tuple[float | None, float | None]:
    """Lazy share pooled over the correct turns of the first and of the second half of the steps."""
    ls, n = d["lazy_share"], d["correct_turns"]
    mid = len(ls) // 2

    def pool(lo: int, hi: int) -> float | None:
        total = sum(n[lo:hi])
        return sum(x * k for x, k in zip(ls[lo:hi], n[lo:hi], strict=True)) / total if total else None

    return pool(0, mid), pool(mid, len(ls))


def _f(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _algo_section(results: dict[str, Any]) -> list[str]:
    """GRPO vs TRLOO: per-seed held-out numbers, the paired difference, its interval and the verdict."""
    a = results["algo_comparison"]
    m = a["metric"]
    lines = ["## GRPO vs TRLOO (the finding under test)", "",
             "Per seed, one SFT checkpoint; from it a GRPO arm (`rl.algo=grpo`: the trainer's group mean and std "
             "over each (prompt, turn) group of per-turn rewards) and a TRLOO arm (`rl.algo=trloo`: leave-one-out "
             "baseline on multi-turn returns), same seed, reward `speedup`, PRS off, same steps. Held-out metric: "
             f"`{m}` after RL (positive difference: TRLOO better).", "",
             f"| seed | GRPO {m} | TRLOO {m} | TRLOO - GRPO | both start at (after SFT) |", "|---|---|---|---|---|"]
    for seed, row in a["per_seed"].items():
        start = results["seeds"][seed]["arms"]["trloo"]["heldout_after_sft"].get(m)
        lines.append(f"| {seed} | {row['grpo']:.3f} | {row['trloo']:.3f} | {row['trloo'] - row['grpo']:+.3f} | "
                     f"{_f(start)} |")
    if not a["same_start"]:
        lines += ["", "**Warning: the two arms' held-out numbers after SFT differ: they did not start from the same "
                  "policy.**"]
    sd = "n/a" if a["sd"] is None else f"{a['sd']:.4f}"
    return [*lines, "", f"Paired differences: mean {a['mean']:+.4f}, sd {sd}, n = {a['n']}.", "",
            verdict_line("TRLOO beats GRPO on held-out " + m, a), ""]


def report(results: dict[str, Any]) -> str:
    """The Markdown report, from ``results.json``'s data alone."""
    cfg = results["config"]
    arms = results["arms"]
    seeds = ", ".join(str(s) for s in results["seed_list"])
    lines = ["# Dr. Kernel at CPU scale (`kernelrl repro drkernel`)", "",
             f"Revision `{results['revision'][:12]}`{' (with uncommitted changes)' if results.get('dirty') else ''}; "
             f"seeds {seeds}. "
             f"Tiny family in hybrid mode (lazy_fraction {cfg['task']['lazy_fraction']} of the SFT answers lazy), "
             f"{cfg['task']['n_train']} train / {cfg['task']['n_heldout']} held-out chains of "
             f"{cfg['task']['min_ops']}-{cfg['task']['max_ops']} ops on {cfg['task']['rows']}x{cfg['task']['cols']}; "
             f"SFT {cfg['sft']['steps']} steps, then RL {cfg['rl']['steps']} steps x {cfg['rl']['prompts_per_step']} "
             f"prompts x {cfg['rl']['group_size']} episodes x {cfg['rl']['turns']} turns "
             f"(stop_at_first_correct={cfg['rl']['stop_at_first_correct']}) per arm. "
             f"Wall time {results['times']['total_s']:.0f} s.", "", "![plots](drkernel.png)", "",
             *_algo_section(results),
             "## (a) Lazy optimisation: share of correct turns with coverage < 0.5", "",
             f"Seeds {', '.join(str(x) for x in results['lazy_seeds'])}, {results['lazy_steps']} RL steps per arm, "
             "both arms from the seed's SFT checkpoint (same seed) at one reward scale: the baseline's reward is PR's "
             "less its profiling term (`coverage` with `coverage_weight=0`: 1 + min(s, 3)), PR + PRS's is "
             "1 + min(s, 3) + coverage with PRS per turn. Per step, seed " + str(results["seed_list"][0]) + ":", "",
             "| arm | reward | PRS | lazy share per step | first | last | mean coverage (last) | pass rate (last) | "
             "PRS rejected (mean) |", "|---|---|---|---|---|---|---|---|---|"]
    for arm, d in results["lazy"].items():
        ls = d["lazy_share"]
        rej = d["prs_rejected"]
        reward = f"{arms[arm]['reward']} {arms[arm].get('reward_options') or ''}".strip()
        lines.append(f"| {arm} | {reward} | {arms[arm]['prs']} | {' '.join(f'{x:.2f}' for x in ls)} | "
                     f"{_f(ls[0] if ls else None)} | {_f(ls[-1] if ls else None)} | "
                     f"{_f(d['coverage_mean'][-1] if ls else None)} | {_f(d['pass_rate'][-1] if ls else None)} | "
                     f"{_f(sum(rej) / len(rej) if rej else None)} |")
    lines += ["", "Held-out (greedy) pass rate / fast_1, seed " + str(results["seed_list"][0]) + ": " + "; ".join(
        f"{arm} after SFT {d['heldout_after_sft'].get('pass_rate', 0):.3f} / {d['heldout_after_sft'].get('fast_1', 0):.3f}, "
        f"after RL {d['heldout_after_rl'].get('pass_rate', 0):.3f} / {d['heldout_after_rl'].get('fast_1', 0):.3f}"
        for arm, d in results["lazy"].items()) + "."]
    lc = results["lazy_comparison"]
    lines += ["", "Lazy share pooled over correct turns (steps weighted by their number of correct turns), first -> "
              "second half of the steps:", "", "| seed | baseline | PR + PRS | second half, baseline - PR + PRS |",
              "|---|---|---|---|"]
    for seed, h in lc["per_seed"].items():
        (a1, a2), (b1, b2) = h["baseline"], h["pr_prs"]
        diff = None if a2 is None or b2 is None else a2 - b2
        lines.append(f"| {seed} | {_f(a1)} -> {_f(a2)} | {_f(b1)} -> {_f(b2)} | {_f(diff)} |")
    lines += ["", verdict_line("PR + PRS lowers the lazy share (second half of the steps)", lc)]
    lines += ["", "## (b) Demonstration, not a finding: GRPO's self-inclusion weight vs TRLOO's", "",
              "This section shows the mechanism, it tests nothing: the group-mean estimator's own-reward weight is "
              "(n-1)/n for any data (its unit test says so); whether that matters for training is the GRPO vs "
              "TRLOO comparison above. Seed " + str(results["seed_list"][0]) + "'s lazy-optimisation arms' policies. "
              "Weight of a turn's own reward in its advantage, dA_i/dr_i (analytic (n-1)/n for the group-mean "
              "baseline over a (prompt, turn) group of n; measured by autograd through the estimators). "
              "TRLOO's is 1.", ""]
    for arm, probe in results["self_inclusion"].items():
        for mode, d in probe.items():
            lines += [f"**{arm}, {mode}**", "",
                      "| turn | turns | mean group size | singleton share | analytic (n-1)/n | drgrpo | grpo (std) | "
                      "trloo | slope drgrpo/trloo | mean return |", "|---|---|---|---|---|---|---|---|---|---|"]
            for t, row in sorted(d["per_turn"].items(), key=lambda kv: int(kv[0])):
                lines.append(f"| {t} | {row['turns']} | {row['mean_group_size']:.2f} | {row['singleton_share']:.2f} | "
                             f"{row['analytic_grpo']:.3f} | {row['drgrpo']:.3f} | {row['grpo']:.3f} | "
                             f"{row['trloo']:.3f} | {_f(row['ratio_drgrpo_to_trloo'])} | {row['mean_return']:.3f} |")
            lines.append("")
    for arm, probe in results["self_inclusion"].items():
        parts = []
        for mode, d in probe.items():
            per = d["per_turn"]
            parts.append(f"{mode}: GRPO " + ", ".join(f"turn {t} {row['drgrpo']:.3f}" for t, row in
                                                     sorted(per.items(), key=lambda kv: int(kv[0])))
                         + f" vs TRLOO {d['all']['trloo']:.3f}")
        lines.append(f"- {arm}: " + "; ".join(parts) + ".")
    lines += ["", "The group-mean baseline scales each turn's own-reward weight by (n-1)/n (0.75 at n = 4); "
              "where episodes stop at their first correct turn, later turns' groups are smaller and the weight "
              "drops further. TRLOO's leave-one-out baseline keeps it at 1 (measured).", ""]
    lines += ["## (c) Sequential test-time scaling on held-out chains", "",
              "Episodes run to the turn limit; fast_1 = correct and faster than eager.", "",
              "| arm | episodes | mean turns | last-turn fast_1 | best-of-turns fast_1 | per budget k: last / best fast_1 "
              "| lazy share of correct |", "|---|---|---|---|---|---|---|"]
    for arm, d in results["test_time"].items():
        per = "; ".join(f"k={p['turns']}: {p['last_fast_1']:.2f} / {p['best_fast_1']:.2f}" for p in d["per_budget"])
        lines.append(f"| {arm} | {d['episodes']} | {d['mean_turns']:.2f} | {d['last_fast_1']:.3f} | "
                     f"{d['best_fast_1']:.3f} | {per} | {d['lazy_share']:.2f} |")
    gains = [d["best_fast_1"] - d["last_fast_1"] for d in results["test_time"].values()]
    if gains:
        lines += ["", ("Best-of-turns beats the last turn by " + ", ".join(f"{g:+.3f}" for g in gains) + " fast_1."
                       if any(g > 0 for g in gains) else
                       "The effect did not appear at this scale: best-of-turns fast_1 equals the last turn's "
                       "(the policy rarely changes a kernel's speed class between turns).")]
        first_only = all(d["per_budget"][0]["best_fast_1"] == d["best_fast_1"] for d in results["test_time"].values())
        if first_only and any(g > 0 for g in gains):
            lines.append("All best-of-turns successes come from the first turn: later turns (refinements after "
                         "feedback) produced no fast kernel, so the gap measures the policy breaking kernels in "
                         "later turns, not sequential refinement improving them. Its SFT data has no multi-turn "
                         "examples.")
    refine = results.get("refinement_comparison")
    if refine and refine["per_seed"]:
        lines += ["", f"Per seed, the {refine['arm']} policy's held-out episodes (same settings): fast_1 of the answer "
                  "after the first turn, after the last turn, and of the best turn.", "",
                  "| seed | first turn | last turn | best of turns |", "|---|---|---|---|",
                  *[f"| {seed} | {row['first_turn']:.3f} | {row['last_turn']:.3f} | {row['best_of_turns']:.3f} |"
                    for seed, row in refine["per_seed"].items()], "",
                  verdict_line("feedback turns (fix: and faster:) improve the answer: last-turn minus first-turn held-out fast_1",
                               refine)]
    lines += ["", "## Times (s)", "", *[f"- {k}: {v:.1f}" for k, v in results["times"].items()], ""]
    return "\n".join(lines)
