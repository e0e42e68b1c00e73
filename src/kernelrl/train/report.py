"""End-of-run report: ``report.md`` (settings, held-out table, timings) and PNG plots of the curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelrl.evaluate.costs import costs_table
from kernelrl.train.logs import read_metrics

CURVES = ("reward/mean", "rollout/pass_rate", "rollout/fast_1", "rollout/mean_speedup", "kl_ref", "entropy",
          "response_length", "clip_frac", "time/step")


def plot_curves(run_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir, "rl")
    names = []
    keys = [k for k in CURVES if any(k in r for r in rows)]
    if not rows or not keys:
        return names
    fig, axes = plt.subplots((len(keys) + 2) // 3, 3, figsize=(12, 3 * ((len(keys) + 2) // 3)), squeeze=False)
    for ax, k in zip(axes.flat, keys, strict=False):
        pts = [(r["step"], r[k]) for r in rows if k in r]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(xs, ys, marker=".", alpha=0.35)
        w = max(1, len(ys) // 10)  # moving average over a tenth of the run
        ax.plot(xs[w - 1:], [sum(ys[i - w + 1:i + 1]) / w for i in range(w - 1, len(ys))], linewidth=2)
        ax.set_title(k)
        ax.set_xlabel("RL step")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(run_dir / "curves.png", dpi=80)
    plt.close(fig)
    names.append("curves.png")
    sft = read_metrics(run_dir, "sft")
    if sft:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.plot([r["step"] for r in sft], [r["loss"] for r in sft])
        ax.set_title("SFT loss")
        fig.tight_layout()
        fig.savefig(run_dir / "sft_loss.png", dpi=80)
        plt.close(fig)
        names.append("sft_loss.png")
    return names


def write_report(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    run = Path(run_dir)
    plots = plot_curves(run)
    cfg = summary["config"]
    a, b = summary.get("after_sft", {}), summary.get("after_rl", {})
    lines = [f"# kernelrl train report: {cfg['name']}", "",
             f"algo `{cfg['rl']['algo']}`, rollout `{cfg['rl']['rollout']}`, reward `{cfg['rl']['reward']}`, "
             f"{cfg['rl']['steps']} RL steps x {cfg['rl']['prompts_per_step']} prompts x {cfg['rl']['group_size']} "
             f"samples, SFT {cfg['sft']['steps']} steps, seed {cfg['seed']}.", "",
             f"## Held-out tasks ({int(a.get('n', 0))} unseen "
             f"{'chains' if cfg['task']['family'] == 'tiny-elementwise' else cfg['task']['suite'] + ' tasks'}, "
             "greedy and sampled)", "",
             "| model | pass rate | fast_1 | mean speedup (correct) |", "|---|---|---|---|"]
    for pre, label in (("", "greedy"), ("sampled_", "sampled T=1")):
        for name, r in (("after SFT", a), ("after RL", b)):
            if r and pre + "pass_rate" in r:
                lines.append(f"| {name}, {label} (n={int(r[pre + 'n'])}) | {r[pre + 'pass_rate']:.3f} | "
                             f"{r[pre + 'fast_1']:.3f} | {r[pre + 'mean_speedup']:.2f} |")
    lines += stage_table(summary)
    lines += ["", "## Times (s)", ""]
    lines += [f"- {k}: {v:.1f}" for k, v in summary.get("times", {}).items()]
    lines += gym_cost_lines(summary)
    lines += ["", "## Example held-out answers after RL", ""]
    lines += [f"- `{e}`" for e in b.get("examples", [])]
    lines += ["", *[f"![{p}]({p})" for p in plots], "", "Full config: `config.yaml`; metrics: `metrics.jsonl`, `tb/`."]
    path = run / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def gym_cost_lines(summary: dict[str, Any]) -> list[str]:
    """Median generate vs evaluate-wait per RL step, and the gym's cost per evaluation by part."""
    lines: list[str] = []
    steps = summary.get("rl_step_times") or {}
    if steps:
        lines += ["", "## Generation vs the gym (median per RL step, s)", "",
                  *[f"- {name}: {value:.3f}" for name, value in steps.items()]]
    costs = summary.get("gym_costs") or {}
    if costs.get("evaluations", {}).get("n"):
        lines += ["", f"## Gym cost per evaluation ({int(costs['evaluations']['n'])} evaluations run)", "",
                  *costs_table(costs)]
    return lines


def stage_table(summary: dict[str, Any]) -> list[str]:
    """A staged run's held-out results after each stage (`kernelrl.train.stages`); empty otherwise."""
    stages = summary.get("stages") or {}
    if not stages:
        return []
    lines = ["", "## Held-out after each stage", "",
             "| stage | pass rate | fast_1 | mean speedup | sampled pass rate | sampled fast_1 | seconds |",
             "|---|---|---|---|---|---|---|"]
    times = summary.get("times", {})
    for name, d in stages.items():
        h = d["heldout"]
        lines.append(f"| {name} | {h['pass_rate']:.3f} | {h['fast_1']:.3f} | {h['mean_speedup']:.2f} | "
                     f"{h.get('sampled_pass_rate', float('nan')):.3f} | {h.get('sampled_fast_1', float('nan')):.3f} | "
                     f"{times.get(name + '_s', 0.0):.0f} |")
    rft, critic = stages.get("rft"), stages.get("critic")
    if rft:
        lines += ["", f"RFT kept {rft['kept']:.0f} of {rft['episodes']:.0f} episodes "
                  f"({rft['kept_solved_after_feedback']:.0f} solved after feedback), {rft['pairs']:.0f} SFT pairs."]
    if critic and "critic/value_loss_first" in critic:
        lines += ["", f"Critic pretraining (actor frozen: {critic['actor_unchanged']}): value loss "
                  f"{critic['critic/value_loss_first']:.3f} -> {critic['critic/value_loss_last']:.3f}, explained "
                  f"variance {critic['critic/explained_variance_first']:.3f} -> "
                  f"{critic['critic/explained_variance_last']:.3f}."]
    return lines
