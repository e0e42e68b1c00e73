"""``report.md`` and ``direct-opd.png`` of `kernelrl repro direct-opd` from its ``results.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelrl.repro.direct_opd import METRICS
from kernelrl.repro.stats import verdict_line

LABELS = {
    "direct_opd": "Direct-OPD, sampled token (T, Tref)",
    "direct_opd_topk": "Direct-OPD, top-K (T, Tref)",
    "reverse_kl": "reverse KL to pi_T (distil the teacher)",
    "rl": "RL on the student (gym reward, step-matched)",
    "sequential": "two shifts: (Tmid, Tref) then (T, Tmid)",
}


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = results["seeds"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, metric, title in ((axes[0], "pass_rate", "held-out greedy pass rate"),
                              (axes[1], "sampled_pass_rate", "held-out sampled pass rate")):
        names = ["teacher ref", "teacher", "student before", *LABELS]
        vals = [[r["teacher"]["ref"][metric] for r in seeds.values()],
                [r["teacher"]["final"][metric] for r in seeds.values()],
                [r["student"]["before"][metric] for r in seeds.values()],
                *[[r["arms"][a]["after"][metric] for r in seeds.values()] for a in LABELS]]
        means = [sum(v) / len(v) for v in vals]
        colors = ["#bbbbbb", "#888888", "#4c72b0"] + ["#dd8452"] * len(LABELS)
        ax.bar(range(len(names)), means, color=colors)
        for i, v in enumerate(vals):
            ax.scatter([i] * len(v), v, color="black", s=10, zorder=3)
        ax.axhline(means[2], color="#4c72b0", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(names)), ["T ref", "T", "S before", "OPD", "OPD top-K", "rev-KL", "RL", "2 shifts"],
                      rotation=30)
        ax.set(title=f"{title} (bars: mean, dots: seeds)", ylim=(0, 1))
    ax = axes[2]
    for arm in ("direct_opd", "direct_opd_topk", "reverse_kl"):
        curves = [r["arms"][arm]["curve"]["kl_teacher"] for r in seeds.values()]
        n = min(len(c) for c in curves)
        ax.plot(range(1, n + 1), [sum(c[i] for c in curves) / len(curves) for i in range(n)], marker=".", label=arm)
    ax.set(title="exact KL(student || pi_T) on its training samples", xlabel="update")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _sign(change: float, what: str) -> str:
    if change != change:  # NaN: not measured (eval.heldout_samples=1)
        return f"did not measure the {what}"
    if change > 0:
        return f"raised the {what} by {change:.3f}"
    if change < 0:
        return f"lowered the {what} by {-change:.3f}"
    return f"left the {what} unchanged"


#: comparison -> the claim it tests (positive paired difference: the claim holds)
CLAIMS = {
    "premise_teacher_shift": "premise: the weak teacher's RL shift is positive",
    "direct_opd_vs_student": "Direct-OPD (sampled) improves the strong student",
    "direct_opd_topk_vs_student": "Direct-OPD (top-K) improves the strong student",
    "direct_opd_vs_rl": "Direct-OPD beats RL on the student at equal updates",
    "direct_opd_vs_reverse_kl": "Direct-OPD beats distilling the teacher's policy (reverse KL)",
    "sequential_vs_student": "two shifts in a row improve the strong student",
}


def report(results: dict[str, Any]) -> str:
    cfg, s, seeds = results["config"], results["summary"], results["seeds"]
    d, m, t = cfg["distill"], cfg["model"], cfg["task"]
    n = len(seeds)
    lines = [
        "# Weak-to-strong Direct-OPD at CPU scale (`kernelrl repro direct-opd`)", "",
        f"Tiny family, {t['n_train']} train / {t['n_heldout']} held-out chains of {t['min_ops']}-{t['max_ops']} ops; "
        f"seeds {', '.join(seeds)}; wall time {results['times']['total_s']:.0f} s. Gym timing "
        f"{'on' if cfg['eval'].get('measure_timing', True) else 'off (correctness only)'}, "
        f"RL reward `{cfg['rl']['reward']}`. Weak teacher: hidden {m['hidden_size']} x {m['num_layers']} layer(s), "
        f"SFT {cfg['sft']['steps']} steps (pi_Tref), RL {cfg['rl']['steps']} steps x {cfg['rl']['prompts_per_step']} "
        f"prompts x {cfg['rl']['group_size']} (pi_T; pi_Tmid halfway). Strong student: hidden "
        f"{d['student_hidden_size']} x {d['student_num_layers'] or m['num_layers']} layers, SFT "
        f"{d['student_sft_steps']} steps on the same data. Every arm starts from that student: {d['steps']} updates of "
        f"{d['prompts_per_step']} prompts x {d['samples_per_prompt']} samples (the sequential arm: {d['steps']} per "
        f"shift), lr {d['lr']}, lambda = {d['token_coef']}, beta = {d['kl_coef']} (KL to the student's start in the "
        f"reward, G-OPD), top-K {d['topk']} ({d['topk_weighting']} weights). Held-out: greedy (1 answer per chain) and "
        f"sampled ({cfg['eval']['heldout_samples']} per chain at T = 1), same chains and eval seeds for everyone.", "",
        "![plots](direct-opd.png)", "",
        f"## Held-out pass rate, mean over {n} seeds (change from the student before any shift)", "",
        "| model | greedy | sampled |", "|---|---|---|",
    ]
    for who, label in (("teacher_ref", "weak teacher pi_Tref"), ("teacher_mid", "weak teacher pi_Tmid"),
                       ("teacher_final", "weak teacher pi_T"), ("student_before", "strong student before")):
        lines.append(f"| {label} | {s[who]['pass_rate']:.3f} | {s[who]['sampled_pass_rate']:.3f} |")
    for arm, label in LABELS.items():
        a = s[arm]
        lines.append(f"| {label} | {a['pass_rate']:.3f} ({a['pass_rate_change']:+.3f}) | "
                     f"{a['sampled_pass_rate']:.3f} ({a['sampled_pass_rate_change']:+.3f}) |")
    lines.append(f"| after the first shift only (Tmid, Tref) | {s['sequential_after_first']['pass_rate']:.3f} | "
                 f"{s['sequential_after_first']['sampled_pass_rate']:.3f} |")
    lines += ["", "## Per seed (greedy / sampled)", "",
              "| seed | T ref | T | S before | " + " | ".join(LABELS) + " |", "|---" * (4 + len(LABELS)) + "|"]
    for seed, r in seeds.items():
        def f(x: dict[str, float]) -> str:
            return f"{x['pass_rate']:.3f} / {x['sampled_pass_rate']:.3f}"
        lines.append(f"| {seed} | {f(r['teacher']['ref'])} | {f(r['teacher']['final'])} | {f(r['student']['before'])} | "
                     + " | ".join(f(r["arms"][a]["after"]) for a in LABELS) + " |")
    if results.get("comparisons"):
        lines += ["", "## Paired over seeds (held-out sampled pass rate)", "",
                  *(verdict_line(CLAIMS[k], v) for k, v in results["comparisons"].items() if k in CLAIMS)]
    lines += ["", "## What happened", ""]
    ref, before, final = s["teacher_ref"], s["student_before"], s["teacher_final"]
    lines.append(f"- The weak teacher's RL {_sign(final['pass_rate'] - ref['pass_rate'], 'greedy pass rate')} and "
                 f"{_sign(final['sampled_pass_rate'] - ref['sampled_pass_rate'], 'sampled pass rate')} "
                 f"(pi_Tref {ref['pass_rate']:.3f} / {ref['sampled_pass_rate']:.3f} -> pi_T {final['pass_rate']:.3f} / "
                 f"{final['sampled_pass_rate']:.3f}): this is the shift the Direct-OPD arms transfer.")
    stronger = before["pass_rate"] > ref["pass_rate"] and before["sampled_pass_rate"] > ref["sampled_pass_rate"]
    lines.append(f"- The student before any shift is {'stronger' if stronger else 'NOT stronger'} than the weak "
                 f"teacher's reference: greedy {before['pass_rate']:.3f} vs {ref['pass_rate']:.3f}, sampled "
                 f"{before['sampled_pass_rate']:.3f} vs {ref['sampled_pass_rate']:.3f}.")
    sizes = {"pass_rate": t["n_heldout"] * n, "sampled_pass_rate": t["n_heldout"] * cfg["eval"]["heldout_samples"] * n}

    def noise(metric: str) -> float:  # two standard errors of a difference of two rates near the student's
        q = min(max(before[metric], 0.05), 0.95)
        return 2 * (2 * q * (1 - q) / sizes[metric]) ** 0.5

    for arm, label in LABELS.items():
        a = s[arm]
        per = ", ".join(f"{x:+.3f}" for x in a["sampled_pass_rate_change_per_seed"])
        within = [m for m in METRICS if not abs(a[f"{m}_change"]) > noise(m)]  # NaN: not measured
        lines.append(f"- {label}: at this scale it {_sign(a['pass_rate_change'], 'greedy pass rate')} and "
                     f"{_sign(a['sampled_pass_rate_change'], 'sampled pass rate')} (per seed, sampled: {per}); "
                     + ("both changes are within the noise." if len(within) == 2 else
                        "beyond the noise: " + ", ".join(m for m in METRICS if m not in within) + "."))
    opd, rl, rkl = s["direct_opd"], s["rl"], s["reverse_kl"]
    lines.append(f"- Direct-OPD vs the baselines (sampled pass rate after): Direct-OPD {opd['sampled_pass_rate']:.3f}, "
                 f"step-matched RL {rl['sampled_pass_rate']:.3f}, reverse KL to pi_T {rkl['sampled_pass_rate']:.3f}.")
    kl_arms = [a for a in LABELS if all("kl_to_teacher" in r["arms"][a]["after"] for r in seeds.values())]
    if kl_arms:
        def kl(a: str, when: str) -> float:
            return sum(r["arms"][a][when]["kl_to_teacher"] for r in seeds.values()) / n
        lines.append("- Exact KL(student || pi_T) on the student's held-out samples, before -> after: " + ", ".join(
            f"{a} {kl(a, 'before'):.3f} -> {kl(a, 'after'):.3f}" for a in kl_arms) + ".")
    seq = s["sequential"]
    lines.append(f"- Sequential composition: two shifts in a row reach {seq['pass_rate']:.3f} / "
                 f"{seq['sampled_pass_rate']:.3f} (greedy / sampled) vs {opd['pass_rate']:.3f} / "
                 f"{opd['sampled_pass_rate']:.3f} for the one shift (T, Tref); after the first shift "
                 f"{s['sequential_after_first']['pass_rate']:.3f} / {s['sequential_after_first']['sampled_pass_rate']:.3f}.")
    lines += ["", f"Noise: {sizes['pass_rate']} greedy and {sizes['sampled_pass_rate']} sampled held-out answers "
              f"over all seeds per model; a change is called within the noise when it is below two binomial standard "
              f"errors of a difference at the student's rate ({noise('pass_rate'):.3f} greedy, "
              f"{noise('sampled_pass_rate'):.3f} sampled; the answers are paired, so this is conservative).",
              "", "## Times (s)", ""]
    lines += [f"- {k}: {v:.1f}" for k, v in results["times"].items()]
    for seed, r in seeds.items():
        lines.append(f"- seed {seed}: " + ", ".join(f"{k} {v:.0f}" for k, v in r["times"].items()) + ", " + ", ".join(
            f"{a} {r['arms'][a]['time_s']:.0f}" for a in LABELS) + f"; gym cache {r['eval_cache']}")
    return "\n".join(lines) + "\n"
