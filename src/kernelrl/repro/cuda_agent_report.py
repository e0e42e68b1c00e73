"""report.md and cuda-agent.png of `kernelrl repro cuda-agent`, rendered from its results.json alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelrl.repro.record import read_record
from kernelrl.repro.stats import verdict_line

#: comparison -> the claim it tests (positive paired difference: the claim holds)
CLAIMS = {
    "rft_vs_warmup": "RFT on successful agent trajectories improves the warm-up policy",
    "ppo_vs_rft": "agentic PPO with a pretrained critic improves over the RFT policy",
    "full_vs_ablation": "the full recipe beats PPO without RFT and critic pretraining (CUDA Agent's ablation)",
    "full_vs_sft": "the whole recipe improves over SFT",
}
STAGE_ORDER = ("sft", "warmup_rl", "rft", "critic", "ppo")


def _f(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None or x != x else f"{x:.{digits}f}"


def _stage_table(r: dict[str, Any], metric: str) -> list[str]:
    head = [*STAGE_ORDER, "ablation: ppo"]
    lines = [f"| seed | {' | '.join(head)} |", "|---|" + "---|" * len(head)]
    for seed, d in r["seeds"].items():
        cells = [_f(d["full"][s]["heldout"][metric]) if s in d["full"] else "-" for s in STAGE_ORDER]
        cells.append(_f(d["ablation"]["ppo"]["heldout"][metric]))
        lines.append(f"| {seed} | {' | '.join(cells)} |")
    return lines


def report(r: dict[str, Any]) -> str:
    """The Markdown report, from ``results.json``'s data alone."""
    c, cmp = r["config"], r["comparisons"]
    t, rl, p = c["task"], c["rl"], c["pipeline"]
    metric, speed = r["metric"], r["speed_metric"]
    lines = [
        "# CUDA Agent's stages over seeds (`kernelrl repro cuda-agent`)", "",
        "CUDA Agent (Dai et al. 2026) trains in stages (single-turn RL warm-up, rejection fine-tuning on agent "
        "trajectories, critic pretraining with the actor frozen, agentic PPO) and reports that agentic RL without RFT "
        "and value pretraining degrades.", "",
        f"Revision `{r['revision'][:12]}`{' (with uncommitted changes)' if r.get('dirty') else ''}; seeds "
        f"{', '.join(str(s) for s in r['seed_list'])}; wall time {r['wall_s']:.0f} s. Policy: a tiny Llama "
        f"({c['model']['hidden_size']} x {c['model']['num_layers']}) trained from scratch on the tiny C family "
        f"({t['n_train']} train / {t['n_heldout']} held-out chains of {t['min_ops']}-{t['max_ops']} elementwise ops over "
        f"{t['rows']}x{t['cols']}). Full recipe: {' -> '.join(p['stages'])} (SFT {c['sft']['steps']} steps; warm-up "
        f"{p['warmup_rl']['steps']} {p['warmup_rl']['algo']} steps; RFT on {p['rft']['prompts']} prompts x "
        f"{p['rft']['episodes']} episodes of {p['rft']['turns']} turns; critic {p['critic']['steps']} steps; PPO "
        f"{rl['steps']} steps x {rl['prompts_per_step']} prompts x {rl['group_size']} samples, {rl['turns']} turns, reward "
        f"`{rl['reward']}`). Ablation: {' -> '.join(r['ablation_stages'])}, branched from the same run's checkpoint "
        f"after `{r['branch_after']}` (same weights, optimizer and RNG states), its critic untrained.", "",
        "![plots](cuda-agent.png)", "",
        f"## Held-out {metric} after each stage ({c['eval']['heldout_samples']} samples per held-out chain)", "",
        *_stage_table(r, metric), "",
        *(verdict_line(CLAIMS[k], cmp[k]) for k in CLAIMS), "",
        f"## Held-out {speed} (correct and faster than eager PyTorch) after each stage", "",
        *_stage_table(r, speed), "",
        *(verdict_line(f"{CLAIMS[k]}, on {speed}", cmp[f"{k}/{speed}"]) for k in CLAIMS), "",
        "## Times (s)", "", *[f"- {k}: {v:.1f}" for k, v in r["times"].items()], "",
    ]
    return "\n".join(lines)


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, metric in zip(axes, (r["metric"], r["speed_metric"]), strict=True):
        for seed, d in r["seeds"].items():
            stages = [s for s in STAGE_ORDER if s in d["full"]]
            line = ax.plot(range(len(stages)), [d["full"][s]["heldout"][metric] for s in stages], marker="o",
                           label=f"seed {seed}")[0]
            ax.plot([stages.index("warmup_rl"), len(stages) - 1],
                    [d["full"]["warmup_rl"]["heldout"][metric], d["ablation"]["ppo"]["heldout"][metric]],
                    linestyle="--", marker="x", color=line.get_color())
        ax.set_xticks(range(len(STAGE_ORDER)), list(STAGE_ORDER))
        ax.set(title=f"held-out {metric} (dashed: PPO without RFT and critic)", ylim=(-0.05, 1.05))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def rewrite_report(out: str | Path) -> None:
    """Render ``report.md`` and ``cuda-agent.png`` from a run's ``results.json`` alone (no training, no gym)."""
    out = Path(out)
    r = read_record(out)
    plot(r, out / "cuda-agent.png")
    (out / "report.md").write_text(report(r))
