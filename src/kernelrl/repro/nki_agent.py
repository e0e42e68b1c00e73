"""`kernelrl repro nki-agent`: NKI-Agent's two findings at CPU scale, with the scripted `nki-draft` author
on the NKI suite judged by the real gym (the NumPy NKI interpreter).

NKI-Agent adapts CUDA-Agent's compile-verify-fix loop to Trainium and reports (i) tool use is critical:
a strong model solved 6% of its tasks single-shot and 77% with the compile/verify/profile tools; (ii) GRPO
with a binary compile reward does not improve over SFT, while an execution-based reward does.

(a) Tool use vs single shot, the same policy: every (task, sample) episode runs once with the first answer
    only and once with the tools (`bench.run_bench`); both start from the same first draft.
(b) Compile vs execution reward, both through `kernelrl.rewards`: (b1) best-of-n: n first drafts per task,
    the answer each reward ranks first (ties uniformly), and the share of reward-maximising answers that
    are correct; (b2) a tiny GRPO run (`rl.advantages.grpo_sequence_advantages`, SGD) on the drafter's
    mistake logits (one Bernoulli per mistake kind, the "SFT" start = `mistake_rate`), one run per reward
    from the same seed, its pass rate measured by the gym before and after.
A scripted author shows the mechanism, not the paper's magnitudes: its skill, mistake and repair rates are
set by hand, and tasks without a shipped reference kernel are beyond it (counted as failures).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.agent.nki_mistakes import MISTAKES, applicable, with_mistakes
from kernelrl.agent.policies.nki_draft import NkiDraftPolicy, stable_seed
from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.pool import EvalPool
from kernelrl.evaluate.result import EvalResult
from kernelrl.evaluate.verdict_cache import VerdictCache
from kernelrl.repro.record import new_record, read_record, write_record
from kernelrl.rewards import get_reward
from kernelrl.tasks import Task, load_task, load_tasks, suite_path
from kernelrl.tasks.suites import SOLUTIONS_DIR


@dataclass
class NkiAgentConfig:
    """The repro's knobs (`key=value` overrides on the command line)."""

    samples: int = 4  # (a) episodes per task and arm
    mistake_rate: float = 0.35  # chance of each applicable mistake in a first draft
    fix_rate: float = 0.8  # chance a repair of the mistake the feedback names succeeds
    max_tool_calls: int = 8
    best_of: int = 8  # (b1) first drafts per task
    rl_steps: int = 25  # (b2)
    rl_tasks: int = 6  # tasks per step
    rl_group: int = 8  # drafts per task (the GRPO group)
    rl_lr: float = 1.0  # SGD on the logits
    eval_samples: int = 16  # (b2) drafts per task to measure the pass rate before and after
    compile_reward: str = "compile"
    execution_reward: str = "speedup"  # the default reward; on the interpreter it is 1 per correct kernel
    correctness_trials: int = 2
    workers: int = 2
    seed: int = 0
    task_ids: list[str] = field(default_factory=list)  # empty: the whole NKI suite

    def __post_init__(self) -> None:
        for name in ("samples", "max_tool_calls", "best_of", "rl_tasks", "rl_group", "eval_samples",
                     "correctness_trials", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.rl_steps < 0:
            raise ValueError(f"rl_steps must be >= 0, got {self.rl_steps}")
        for name in ("mistake_rate", "fix_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    @classmethod
    def build(cls, smoke: bool = False, overrides: list[str] | None = None) -> NkiAgentConfig:
        base = cls(samples=2, max_tool_calls=4, best_of=2, rl_steps=1, rl_tasks=1, rl_group=2, eval_samples=1,
                   task_ids=["level1/01_ReLU", "level1/06_Exp"]) if smoke else cls()
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for item in overrides or []:
            key, sep, value = item.partition("=")
            if not sep or key not in fields:
                raise ValueError(f"bad override {item!r}: want KEY=VALUE with KEY one of {', '.join(fields)}")
            current = getattr(base, key)
            if isinstance(current, list):
                parsed: Any = [v for v in value.split(",") if v]
            elif isinstance(current, int | float):
                try:
                    parsed = type(current)(value)
                except ValueError:
                    raise ValueError(f"override {key}={value!r}: want a {type(current).__name__}") from None
            else:
                parsed = value
            setattr(base, key, parsed)
        base.__post_init__()
        return base


class DraftCache(VerdictCache):
    """`VerdictCache` over NKI drafts (plain sources) of suite tasks, by task id: identical drafts are judged
    once. (`train.rollout.EvalCache` does the same over a `TaskFamily`'s answer texts.)"""

    def __init__(self, pool: EvalPool, tasks: dict[str, Task]) -> None:
        super().__init__(pool)
        self.tasks = tasks

    def submit(self, task_id: str, source: str) -> cf.Future[EvalResult]:
        return self.judge(self.tasks[task_id], Candidate(source, "nki"))


def tool_use(cfg: NkiAgentConfig, tasks: list[Task], solutions: dict[str, str], pool: EvalPool, out: Path) -> dict[str, Any]:
    """(a): the same policy over the suite, first answer only vs the compile/verify tools."""
    from kernelrl.agent.episode import EpisodeConfig
    from kernelrl.agent.prompts import PromptConfig
    from kernelrl.bench import BenchConfig, run_bench

    policy = NkiDraftPolicy(cfg.mistake_rate, cfg.fix_rate, cfg.seed, solutions=solutions,
                            name=f"nki-draft(m={cfg.mistake_rate},f={cfg.fix_rate},seed={cfg.seed})")
    evalc = EvalConfig(correctness_trials=cfg.correctness_trials, measure_timing=False)
    arms: dict[str, Any] = {}
    for arm, tools in (("single_shot", False), ("tools", True)):
        episode = EpisodeConfig(max_turns=1, tools=tools, max_tool_calls=cfg.max_tool_calls, seed=cfg.seed,
                                prompt=PromptConfig(backend="nki"))
        run = run_bench(tasks, policy, out / arm, BenchConfig(samples=cfg.samples, episode=episode, eval=evalc),
                        pool=pool, progress=False)
        solved = {(t.task_id, t.sample): bool(t.turns and t.turns[-1].correct)
                  for t in run.trajectories}
        arms[arm] = {"solved": solved, "calls": [t.turns[0].tool_calls for t in run.trajectories if t.turns]}
    known = set(policy.solutions)
    first = {(t.id, s): policy.first_draft(t.id, s) for t in tasks if t.id in known for s in range(cfg.samples)}
    result: dict[str, Any] = {"episodes": len(arms["tools"]["solved"]), "tasks": len(tasks),
                              "tasks_with_reference": sum(t.id in known for t in tasks)}
    for arm, data in arms.items():
        solved = data["solved"]
        ref = [v for (task, _), v in solved.items() if task in known]
        result[arm] = {"pass_rate": _mean(solved.values()), "pass_rate_with_reference": _mean(ref),
                       "by_level": {lvl: _mean(v for (task, _), v in solved.items() if task.startswith(f"level{lvl}/"))
                                    for lvl in sorted({t.level for t in tasks})},
                       "tool_calls_mean": _mean(data["calls"])}
    s, t = arms["single_shot"]["solved"], arms["tools"]["solved"]
    result["tools_only"] = sum(t[k] and not s[k] for k in s)
    result["single_shot_only"] = sum(s[k] and not t[k] for k in s)
    result["first_draft_mistakes"] = {k: _mean(k in m for m in first.values()) for k in MISTAKES}
    result["first_draft_clean"] = _mean(not m for m in first.values())
    return result


def best_of_n(cfg: NkiAgentConfig, policy: NkiDraftPolicy, cache: DraftCache, task_ids: list[str]) -> dict[str, Any]:
    """(b1): n first drafts per task; what each reward ranks first, and how often that answer is correct."""
    futures = {(task, s): cache.submit(task, with_mistakes(policy.solutions[task], policy.first_draft(task, 10_000 + s)))
               for task in task_ids for s in range(cfg.best_of)}
    results = {key: f.result() for key, f in futures.items()}
    out: dict[str, Any] = {"n": cfg.best_of, "tasks": len(task_ids), "answers": len(results)}
    correct = {key: bool(r.correct) for key, r in results.items()}
    out["answers_correct"] = _mean(correct.values())
    for label, name in (("compile", cfg.compile_reward), ("execution", cfg.execution_reward)):
        reward = get_reward(name)
        scores = {key: reward(r) for key, r in results.items()}
        picked = []
        for task in task_ids:
            keys = [(task, s) for s in range(cfg.best_of)]
            best = max(scores[k] for k in keys)
            picked.append(_mean(correct[k] for k in keys if scores[k] == best))  # a uniform tie-break
        positive = [correct[k] for k in results if scores[k] > 0]
        out[label] = {"reward": name, "selected_correct": _mean(picked),
                      "rewarded_answers": len(positive), "rewarded_correct": _mean(positive)}
    return out


def grpo(cfg: NkiAgentConfig, solutions: dict[str, str], cache: DraftCache, task_ids: list[str], reward_name: str) -> dict[str, Any]:
    """(b2): GRPO on the drafter's mistake logits with one reward; the gym judges every draft."""
    import torch

    from kernelrl.rl.advantages import grpo_sequence_advantages

    torch.manual_seed(cfg.seed)
    start = math.log(cfg.mistake_rate / (1 - cfg.mistake_rate)) if 0 < cfg.mistake_rate < 1 else 0.0
    logits = torch.full((len(MISTAKES),), start, requires_grad=True)  # plain SGD: torch.optim's first step costs seconds
    reward = get_reward(reward_name)
    kinds = {t: applicable(solutions[t]) for t in task_ids}
    history: dict[str, list[Any]] = {"reward": [], "correct": [], "compiled": [], "expected_pass": [], "mistake_p": []}
    order = random.Random(cfg.seed)
    by_kind: dict[str, dict[str, list[float]]] = {k: {"with": [], "without": []} for k in MISTAKES}

    def expected_pass(p: list[float]) -> float:
        return _mean(math.prod(1 - p[MISTAKES.index(k)] for k in kinds[t]) for t in task_ids)

    for step in range(cfg.rl_steps):
        p = torch.sigmoid(logits)
        probs = p.detach().tolist()
        batch = order.sample(task_ids, min(cfg.rl_tasks, len(task_ids)))
        draws, futures = [], []
        for gi, task in enumerate(batch):
            for g in range(cfg.rl_group):
                u = random.Random(stable_seed(cfg.seed, step, task, g))  # common random numbers across rewards
                made = frozenset(k for k in kinds[task] if u.random() < probs[MISTAKES.index(k)])
                draws.append((gi, made, kinds[task]))
                futures.append(cache.submit(task, with_mistakes(solutions[task], made)))
        results = [f.result() for f in futures]
        rewards = torch.tensor([reward(r) for r in results], dtype=torch.float64)
        groups = torch.tensor([gi for gi, _, _ in draws])
        adv = grpo_sequence_advantages(rewards, groups).float()
        logp = torch.stack([sum((torch.log(p[MISTAKES.index(k)]) if k in made else torch.log1p(-p[MISTAKES.index(k)]))
                                for k in app) if app else torch.zeros(()) for _, made, app in draws])
        loss = -(adv * logp).mean()
        (grad,) = torch.autograd.grad(loss, logits)
        with torch.no_grad():
            logits -= cfg.rl_lr * grad
        for (_, made, app), value in zip(draws, rewards.tolist(), strict=True):
            for k in app:
                by_kind[k]["with" if k in made else "without"].append(value)
        history["reward"].append(float(rewards.mean()))
        history["correct"].append(_mean(bool(r.correct) for r in results))
        history["compiled"].append(_mean(get_reward("compile")(r) for r in results))
        history["expected_pass"].append(expected_pass(probs))
        history["mistake_p"].append([round(x, 4) for x in probs])
    final = torch.sigmoid(logits).tolist()
    history["expected_pass"].append(expected_pass(final))
    history["mistake_p"].append([round(x, 4) for x in final])
    kind_reward = {k: {side: _mean(v) for side, v in d.items()} for k, d in by_kind.items()}
    return {"reward": reward_name, "history": history, "final_mistake_p": dict(zip(MISTAKES, final, strict=True)),
            "kind_reward": kind_reward}


def measured_pass(cfg: NkiAgentConfig, solutions: dict[str, str], cache: DraftCache, task_ids: list[str],
                  mistake_p: dict[str, float]) -> dict[str, float]:
    """Pass and compile rates the gym measures for `eval_samples` drafts per task at these mistake rates."""
    futures = []
    for task in task_ids:
        for s in range(cfg.eval_samples):
            u = random.Random(stable_seed(cfg.seed, "eval", task, s))
            made = frozenset(k for k in applicable(solutions[task]) if u.random() < mistake_p[k])
            futures.append(cache.submit(task, with_mistakes(solutions[task], made)))
    results = [f.result() for f in futures]
    return {"pass_rate": _mean(bool(r.correct) for r in results),
            "compile_rate": _mean(get_reward("compile")(r) for r in results)}


def run_nki_agent(cfg: NkiAgentConfig, out: str | Path, pool: EvalPool | None = None) -> dict[str, Any]:
    """Run (a) and (b); write results.json, report.md and nki-agent.png under `out`."""
    from kernelrl.repro.nki_agent_report import write_report

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    root = suite_path(backend="nki")
    if cfg.task_ids:  # load only these (a smoke run should not pay for the whole suite)
        unknown = [t for t in cfg.task_ids if not (root / f"{t}.py").is_file()]
        if unknown:
            raise ValueError(f"task_ids not in the NKI suite {root}: {unknown}")
        tasks = [load_task(root / f"{t}.py") for t in cfg.task_ids]
    else:
        tasks = load_tasks(root)
    kernels = SOLUTIONS_DIR / "nki"  # the shipped reference kernels, read by path (no task loading)
    solutions = {t.id: (kernels / f"{t.id}.py").read_text() for t in tasks if (kernels / f"{t.id}.py").is_file()}
    if not solutions:
        raise ValueError("none of the chosen tasks has a shipped NKI reference kernel: nothing to draft from")
    own = pool is None
    pool = pool or EvalPool(workers=cfg.workers, config=EvalConfig(correctness_trials=cfg.correctness_trials,
                                                                   measure_timing=False))
    times: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        results: dict[str, Any] = {**new_record("nki-agent", dataclasses.asdict(cfg)), "seed_list": [cfg.seed]}
        results["tool_use"] = tool_use(cfg, tasks, solutions, pool, out)
        times["tool_use_s"] = time.perf_counter() - t0
        cache = DraftCache(pool, {t.id: t for t in tasks})
        ids = sorted(solutions)
        policy = NkiDraftPolicy(cfg.mistake_rate, cfg.fix_rate, cfg.seed, solutions=solutions)
        results["best_of_n"] = best_of_n(cfg, policy, cache, ids)
        times["best_of_n_s"] = time.perf_counter() - t0 - times["tool_use_s"]
        start = {k: cfg.mistake_rate for k in MISTAKES}
        rl: dict[str, Any] = {"sft": measured_pass(cfg, solutions, cache, ids, start)}
        for label, name in (("compile", cfg.compile_reward), ("execution", cfg.execution_reward)):
            run = grpo(cfg, solutions, cache, ids, name)
            run["after"] = measured_pass(cfg, solutions, cache, ids, run["final_mistake_p"])
            rl[label] = run
        rl["gym_evaluations"], rl["cache_hits"] = cache.submitted, cache.hits
        results["grpo"] = rl
        times["total_s"] = results["wall_s"] = time.perf_counter() - t0
        results["times"] = times
    finally:
        if own:
            pool.close()
    write_record(out, results)
    write_report(read_record(out), out)  # from the file alone
    return results


def _mean(values: Any) -> float:
    items = [float(v) for v in values]
    return sum(items) / len(items) if items else float("nan")
