"""`kernelrl repro direct-opd`: weak-to-strong Direct-OPD at CPU scale on the tiny family.

Direct-OPD's claim: a weak teacher improved by RL (``pi_T``) and its pre-RL reference (``pi_Tref``) give
a dense token reward ``log pi_T - log pi_Tref`` that improves a *stronger* student, and shifts compose
sequentially (`kernelrl.train.distill`, with the KL to the student's start inside the reward, G-OPD,
Yang et al. 2026, arXiv 2602.12125). Per seed:

1. weak teacher: a small model (`model`), short SFT (``pi_Tref``), RL against the gym (``pi_T``; the
   policy halfway through RL is ``pi_Tmid``);
2. strong student: a larger model (`distill.student_hidden_size`, `distill.student_num_layers`) trained
   longer on the same SFT data (`distill.student_sft_steps`), judged before any shift;
3. arms from that student, each `distill.steps` updates of `distill.prompts_per_step` x
   `distill.samples_per_prompt` samples: ``direct_opd`` (sampled-token reward of the pair (T, Tref)),
   ``direct_opd_topk`` (top-K reward), ``reverse_kl`` (distil the teacher's final policy, reward
   ``log pi_T - log pi``), ``rl`` (RL on the student with the gym's reward, same number of updates and
   samples per update) and ``sequential`` (the shift (Tmid, Tref), then (T, Tmid) from its result by
   ``student_from``; with lambda = beta its optimum is the one shift (T, Tref)'s).

Held-out pass rates (greedy and sampled) of everyone on the same chains and eval seeds. The teacher's RL is
the recipe whose shift is significant on every seed at this scale (CUDA Agent's warm-up: GRPO with the
`speedup` reward, gym timing on, 50 steps; binary-reward RL of 12-80 steps left the teacher where it was or
lowered it), and the student (256 wide, SFT at lr 1e-3) starts well below the ceiling. Paired over seeds on the
held-out sampled pass rate (`comparisons`): the premise (the teacher's shift), each arm over the student's
start, Direct-OPD against RL and against reverse KL. Writes ``results.json`` (`kernelrl.repro.record`), then
``report.md`` and ``direct-opd.png`` rendered from it alone.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from kernelrl.evaluate import EvalPool
from kernelrl.repro.record import new_record, read_record, write_record
from kernelrl.repro.seeds import run_seeds
from kernelrl.repro.stats import paired
from kernelrl.train.config import TrainConfig, load_config
from kernelrl.train.distill import run_distill
from kernelrl.train.job import run_train
from kernelrl.train.logs import read_metrics
from kernelrl.train.rollout import EvalCache
from kernelrl.train.task_family import make_family

#: arm -> distill overrides (``rl`` and ``sequential`` are run differently, see `run_seed`)
ARMS: dict[str, dict[str, Any]] = {
    "direct_opd": {"objective": "direct_opd", "token_reward": "sampled"},
    "direct_opd_topk": {"objective": "direct_opd", "token_reward": "topk"},
    "reverse_kl": {"objective": "reverse_kl", "token_reward": "sampled"},
    "rl": {},
    "sequential": {"objective": "direct_opd", "token_reward": "sampled"},
}
METRICS = ("pass_rate", "sampled_pass_rate")

_COMMON = ["threads=1", "checkpoint_every=0", "tensorboard=false", "progress=false", "rl.dynamic_sampling=false",
           "distill.student=wide", "distill.kl_mode=reward", "distill.token_coef=1.0", "distill.kl_coef=1.0"]
#: the CPU-scale setting (about 25 minutes for 3 seeds on 2 cores); `smoke=True` shrinks it to seconds
DEFAULT = [*_COMMON, "name=repro-direct-opd", "task.n_train=256", "task.n_heldout=32", "task.min_ops=2",
           "task.max_ops=4", "task.rows=512", "task.cols=1024",
           "model.hidden_size=128", "model.num_layers=2", "model.num_heads=4", "sft.steps=150",
           "rl.steps=50", "rl.prompts_per_step=4", "rl.group_size=8", "rl.lr=0.0002", "rl.kl_coef=0.05",
           "rl.reward=speedup", "eval.measure_timing=true", "eval.correctness_trials=2", "eval.timing_trials=5",
           "eval.timing_budget_s=0.3", "eval.workers=2", "eval.heldout_samples=4",
           "distill.student_hidden_size=256", "distill.student_num_layers=2", "distill.student_sft_steps=150",
           "distill.student_sft_lr=0.001", "distill.steps=12", "distill.prompts_per_step=4",
           "distill.samples_per_prompt=8", "distill.lr=0.0003", "distill.topk=8"]
SMOKE = [*_COMMON, "rl.reward=binary", "eval.measure_timing=false", "eval.correctness_trials=1",
         "name=repro-direct-opd-smoke", "task.n_train=4", "task.n_heldout=1", "task.min_ops=2",
         "task.max_ops=2", "task.rows=64", "task.cols=256", "eval.sandbox=none", "eval.workers=1",
         "eval.heldout_samples=1", "rl.steps=2", "rl.prompts_per_step=1", "rl.group_size=2", "rl.max_new_tokens=16",
         "sft.steps=2", "distill.student_hidden_size=48", "distill.student_sft_steps=3", "distill.steps=2",
         "distill.prompts_per_step=1", "distill.samples_per_prompt=2", "distill.topk=4"]


def repro_config(smoke: bool = False, overrides: list[str] | None = None) -> TrainConfig:
    """The repro's base config (`DEFAULT` on the ``tiny-cpu`` preset, or `SMOKE` on ``smoke``), then `overrides`."""
    return load_config("smoke" if smoke else "tiny-cpu", overrides=[*(SMOKE if smoke else DEFAULT), *(overrides or [])])


def _heldout(d: dict[str, Any]) -> dict[str, float]:
    """The numbers of a held-out eval; ``sampled_pass_rate`` is NaN when `eval.heldout_samples` is 1 (greedy only)."""
    return {"sampled_pass_rate": float("nan"), **{k: float(v) for k, v in d.items() if isinstance(v, int | float)}}


def _stage_pair(out: Path, ref: Path, policy: Path) -> Path:
    """A teacher-pair directory (``sft_policy`` = `ref`, ``policy`` = `policy`) for `distill.teacher_run`."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ref, out / "sft_policy.safetensors")
    shutil.copyfile(policy, out / "policy.safetensors")
    return out


def _distill_arm(cfg: TrainConfig, out: Path, cache: EvalCache, *, teacher_run: Path, student_from: Path,
                 **distill: Any) -> dict[str, Any]:
    c = cfg.model_copy(deep=True)
    c.out_dir = str(out)
    c.distill = c.distill.model_copy(update={"teacher_run": str(teacher_run), "student_from": str(student_from),
                                             **distill})
    s = run_distill(c, cache=cache)
    rows = read_metrics(out / "distill", "distill")
    return {"after": _heldout(s["after"]), "before": _heldout(s["before"]), "teacher": _heldout(s["teacher"]["heldout"]),
            "curve": {k: [r[k] for r in rows] for k in ("kl_teacher", "opd_reward", "token_reward")},
            "time_s": s["times"]["total_s"]}


def run_seed(cfg: TrainConfig, out: Path, pool: EvalPool, say: Any = print) -> dict[str, Any]:
    """Teacher, student and the five arms for one seed (`cfg.seed`) under `out`; returns their numbers."""
    out.mkdir(parents=True, exist_ok=True)
    cache = EvalCache(pool, make_family(cfg.task, cfg.seed))  # one seed's runs share verdicts of equal answers
    d = cfg.distill
    res: dict[str, Any] = {"times": {}, "arms": {}}
    t0 = time.perf_counter()
    tcfg = cfg.model_copy(deep=True)
    half = max(1, cfg.rl.steps // 2)
    tcfg.checkpoint_every = half  # the policy halfway through RL: the first of two shifts
    say(f"weak teacher ({cfg.model.hidden_size}x{cfg.model.num_layers}, SFT {cfg.sft.steps}, RL {cfg.rl.steps} steps)")
    ts = run_train(tcfg, run_dir=out / "teacher", echo=False, cache=cache, report=False)
    res["teacher"] = {"ref": _heldout(ts["after_sft"]), "final": _heldout(ts["after_rl"])}
    res["times"]["teacher_s"] = time.perf_counter() - t0
    mid = out / "teacher" / "checkpoints" / f"step_{half}" / "policy.safetensors"
    stage1 = _stage_pair(out / "teacher_stage1", out / "teacher" / "sft_policy.safetensors", mid)
    stage2 = _stage_pair(out / "teacher_stage2", mid, out / "teacher" / "policy.safetensors")

    t0 = time.perf_counter()
    scfg = cfg.model_copy(deep=True)
    scfg.model = cfg.model.model_copy(update={"hidden_size": d.student_hidden_size,
                                              "num_layers": d.student_num_layers or cfg.model.num_layers})
    scfg.sft = cfg.sft.model_copy(update={"steps": d.student_sft_steps, "lr": d.student_sft_lr or cfg.sft.lr})
    scfg.rl.steps = 0
    say(f"strong student ({d.student_hidden_size}x{scfg.model.num_layers}, SFT {d.student_sft_steps} steps)")
    ss = run_train(scfg, run_dir=out / "student", echo=False, cache=cache, report=False)
    res["student"] = {"before": _heldout(ss["after_sft"])}
    res["times"]["student_s"] = time.perf_counter() - t0
    student = out / "student"

    for arm in ("direct_opd", "direct_opd_topk", "reverse_kl"):
        say(f"arm {arm} ({d.steps} updates)")
        res["arms"][arm] = _distill_arm(cfg, out / arm, cache, teacher_run=out / "teacher", student_from=student,
                                        **ARMS[arm])
    t0 = time.perf_counter()
    say(f"arm rl ({d.steps} RL updates on the student, gym reward {cfg.rl.reward})")
    rcfg = scfg.model_copy(deep=True)
    rcfg.model.init_from = str(student / "policy.safetensors")
    rcfg.sft.steps = 0
    rcfg.rl = rcfg.rl.model_copy(update={"steps": d.steps, "prompts_per_step": d.prompts_per_step,
                                         "group_size": d.samples_per_prompt})
    rs = run_train(rcfg, run_dir=out / "rl", echo=False, cache=cache, report=False)
    rows = read_metrics(out / "rl", "rl")
    res["arms"]["rl"] = {"after": _heldout(rs["after_rl"]), "before": _heldout(rs["after_sft"]),
                         "curve": {"rollout_pass_rate": [r.get("rollout/pass_rate", 0.0) for r in rows]},
                         "time_s": time.perf_counter() - t0}
    say(f"arm sequential: shift (Tmid, Tref) then (T, Tmid), {d.steps} updates each")
    first = _distill_arm(cfg, out / "sequential_1", cache, teacher_run=stage1, student_from=student,
                         **ARMS["sequential"])
    second = _distill_arm(cfg, out / "sequential_2", cache, teacher_run=stage2, student_from=out / "sequential_1",
                          **ARMS["sequential"])
    res["teacher"]["mid"] = first["teacher"]
    res["arms"]["sequential"] = {**second, "after_first": first["after"], "time_s": first["time_s"] + second["time_s"]}
    res["eval_cache"] = {"submitted": cache.submitted, "hits": cache.hits}
    return res


def summarize(seeds: dict[str, Any]) -> dict[str, Any]:
    """Mean over seeds of each arm's held-out numbers and its change from the student before any shift."""
    out: dict[str, Any] = {}

    def mean(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else float("nan")

    rows = list(seeds.values())
    for m in METRICS:
        out.setdefault("student_before", {})[m] = mean([r["student"]["before"][m] for r in rows])
        for who in ("ref", "mid", "final"):
            out.setdefault(f"teacher_{who}", {})[m] = mean([r["teacher"][who][m] for r in rows])
        for arm in ARMS:
            after = [r["arms"][arm]["after"][m] for r in rows]
            delta = [r["arms"][arm]["after"][m] - r["student"]["before"][m] for r in rows]
            out.setdefault(arm, {})[m] = mean(after)
            out[arm][f"{m}_change"] = mean(delta)
            out[arm][f"{m}_change_per_seed"] = delta
    out["sequential_after_first"] = {m: mean([r["arms"]["sequential"]["after_first"][m] for r in rows]) for m in METRICS}
    return out


#: comparison -> (minuend, subtrahend) on held-out sampled pass: (arm or "teacher_final", arm or "student" / "teacher_ref")
COMPARISONS = {
    "premise_teacher_shift": ("teacher_final", "teacher_ref"),
    "direct_opd_vs_student": ("direct_opd", "student"),
    "direct_opd_topk_vs_student": ("direct_opd_topk", "student"),
    "direct_opd_vs_rl": ("direct_opd", "rl"),
    "direct_opd_vs_reverse_kl": ("direct_opd", "reverse_kl"),
    "sequential_vs_student": ("sequential", "student"),
}


def _sampled(r: dict[str, Any], who: str) -> float:
    if who == "student":
        return r["student"]["before"]["sampled_pass_rate"]
    if who.startswith("teacher_"):
        return r["teacher"][who.removeprefix("teacher_")]["sampled_pass_rate"]
    return r["arms"][who]["after"]["sampled_pass_rate"]


def comparisons(seeds: dict[str, Any]) -> dict[str, Any]:
    """`COMPARISONS` paired over seeds (`repro.stats.paired`; positive: the claim holds)."""
    return {name: paired([_sampled(r, a) - _sampled(r, b) for r in seeds.values()]) for name, (a, b) in COMPARISONS.items()}


def run_direct_opd(cfg: TrainConfig, out: str | Path, *, seeds: tuple[int, ...] = (0, 1, 2),
                   pool: EvalPool | None = None, echo: bool = True) -> dict[str, Any]:
    """All seeds, then ``results.json``, ``direct-opd.png`` and ``report.md`` under `out`. Returns the results."""
    t_start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {**new_record("direct-opd", cfg.model_dump()), "seed_list": list(seeds), "seeds": {},
                               "times": {}}
    run_seeds("direct-opd", cfg, seeds, out, results, run_seed, pool=pool, echo=echo, started=t_start)
    results["summary"] = summarize(results["seeds"])
    results["comparisons"] = comparisons(results["seeds"])
    results["times"]["total_s"] = results["wall_s"] = time.perf_counter() - t_start
    write_record(out, results)
    rewrite_report(out)
    return results


def write_outputs(results: dict[str, Any], out: Path) -> None:
    from kernelrl.repro.direct_opd_report import plot, report

    plot(results, out / "direct-opd.png")
    (out / "report.md").write_text(report(results))


def rewrite_report(out: str | Path) -> None:
    """Render ``report.md`` and ``direct-opd.png`` from a run's ``results.json`` alone (no training, no gym)."""
    out = Path(out)
    write_outputs(read_record(out), out)
