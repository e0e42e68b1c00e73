"""Markdown report and PNG plots for one run; a side-by-side comparison of two runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kernelrl.agent.records import Trajectory
from kernelrl.bench.metrics import CONVENTIONS, P_VALUES, fast_p, summarize, turn_outcome

SUMMARY = "summary.json"
REPORT = "report.md"


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return "–"
    if pct:
        return f"{100 * value:.1f}%"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _speedup(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def metric_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs of the headline metrics of one summary block, clearly labelled."""
    rows = [("tasks", str(s["tasks"])), ("samples (all tasks)", str(s["samples"])), ("correct (per sample)", _fmt(s["correct_rate"], True))]
    rows += [(f"pass@{k}", _fmt(v, True)) for k, v in s["pass_at_k"].items()]
    rows.append(("geomean speedup vs eager (correct samples)", _speedup(s["geomean_speedup"])))
    rows.append(("geomean speedup vs torch.compile (correct samples)",
                 _speedup(s["geomean_speedup_compiled"]) if s.get("fast_p_compiled") else "not measured"))
    for conv in CONVENTIONS:
        for p in ("1", "1.5", "2"):
            rows.append((f"fast_{p} vs eager, {conv} ({'>' if conv == 'strict' else '>='} {p}x)", _fmt(s["fast_p"][conv][p], True)))
    if s.get("fast_p_compiled"):
        for conv in CONVENTIONS:
            rows.append((f"fast_1 vs torch.compile, {conv} ({'>' if conv == 'strict' else '>='} 1x)",
                         _fmt(s["fast_p_compiled"][conv]["1"], True)))
    return rows


def markdown(summary: dict[str, Any], title: str, plots: list[str]) -> str:
    """The report text: headline metrics, fast_p table (both conventions), per turn, per level."""
    o = summary["overall"]
    lines = [f"# {title}", "", "Best over turns per sample unless stated. fast_p conventions:"]
    lines += [f"- **{k}**: {v}" for k, v in CONVENTIONS.items()]
    lines += ["- fast_p is the mean over tasks of the fraction of samples that qualify; fast_0 = correct rate.", ""]
    lines += ["| metric | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in metric_rows(o)] + [""]
    for baseline, key in (("eager PyTorch", "fast_p"), ("torch.compile", "fast_p_compiled")):
        if not o.get(key):
            lines += [f"fast_p vs {baseline}: not measured (run with --compile-baseline).", ""]
            continue
        lines += [f"## fast_p vs {baseline}", "", "| p | " + " | ".join(f"{p:g}" for p in P_VALUES) + " |",
                  "|---|" + "---|" * len(P_VALUES)]
        for conv in CONVENTIONS:
            lines.append(f"| {conv} | " + " | ".join(_fmt(o[key][conv][f'{p:g}'], True) for p in P_VALUES) + " |")
        lines.append("")
    lines += ["## By turn", "", "Best so far (up to and including the turn) and, in brackets, that turn's own result.", "",
              "| turn | correct | pass@1 | fast_1 strict | fast_1 at least | geomean vs eager |", "|---|---|---|---|---|---|"]
    for t, own in zip(summary["by_turn"], summary["at_turn"], strict=True):
        lines.append(f"| {t['turn']} | {_fmt(t['correct_rate'], True)} ({_fmt(own['correct_rate'], True)}) | "
                     f"{_fmt(t['pass_at_k'].get('1'), True)} | "
                     f"{_fmt(t['fast_p']['strict']['1'], True)} ({_fmt(own['fast_p']['strict']['1'], True)}) | "
                     f"{_fmt(t['fast_p']['at_least']['1'], True)} ({_fmt(own['fast_p']['at_least']['1'], True)}) | "
                     f"{_speedup(t['geomean_speedup'])} ({_speedup(own['geomean_speedup'])}) |")
    lines += ["", "## By level", "", "| level | tasks | correct | pass@1 | fast_1 strict | fast_1 at least | geomean vs eager | geomean vs compile |",
              "|---|---|---|---|---|---|---|---|"]
    for level, s in summary["by_level"].items():
        lines.append(f"| {level} | {s['tasks']} | {_fmt(s['correct_rate'], True)} | {_fmt(s['pass_at_k'].get('1'), True)} | "
                     f"{_fmt(s['fast_p']['strict']['1'], True)} | {_fmt(s['fast_p']['at_least']['1'], True)} | "
                     f"{_speedup(s['geomean_speedup'])} | {_speedup(s['geomean_speedup_compiled'])} |")
    u = summary["usage"]
    lines += ["", f"Model calls: {u['calls']}, prompt tokens: {u['prompt_tokens']}, completion tokens: "
              f"{u['completion_tokens']}. Stop reasons: {summary['stop_reasons']}.", ""]
    lines += [f"![{Path(p).stem}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def plot(trajectories: list[Trajectory], summary: dict[str, Any], directory: Path) -> list[str]:
    """Speedup distribution, fast_p curve, per-turn improvement, per-level table; returns relative paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    outcomes = [turn_outcome(t, None) for t in trajectories]
    speedups = [o.speedup for o in outcomes if o.correct and o.speedup]

    fig, ax = plt.subplots(figsize=(6, 4))
    if speedups:
        ax.hist([math.log2(s) for s in speedups], bins=min(30, max(5, len(speedups))), color="tab:blue")
    ax.axvline(0.0, color="black", linestyle="--", linewidth=1)
    ax.set(xlabel="log2 speedup vs eager (correct samples, best over turns)", ylabel="samples", title="Speedup distribution")
    written.append(_save(fig, directory / "speedup_distribution.png"))

    by_task: dict[str, list[Any]] = {}
    for traj, outcome in zip(trajectories, outcomes, strict=True):
        by_task.setdefault(traj.task_id, []).append(outcome)
    ps = [i / 20 for i in range(0, 81)]
    fig, ax = plt.subplots(figsize=(6, 4))
    for conv, style in (("strict", "-"), ("at_least", "--")):
        ax.plot(ps, [fast_p(by_task, p, conv) or 0.0 for p in ps], style, label=f"vs eager, {CONVENTIONS[conv]}")
        if summary["overall"].get("fast_p_compiled"):
            ax.plot(ps, [fast_p(by_task, p, conv, "compiled") or 0.0 for p in ps], style, label=f"vs torch.compile, {conv}")
    ax.set(xlabel="speedup threshold p", ylabel="fast_p", title="fast_p curve", ylim=(0, 1.02))
    ax.legend(fontsize=7)
    written.append(_save(fig, directory / "fast_p.png"))

    turns = summary["by_turn"]
    fig, ax = plt.subplots(figsize=(6, 4))
    x = [t["turn"] for t in turns]
    ax.plot(x, [t["correct_rate"] or 0.0 for t in turns], "o-", label="correct")
    ax.plot(x, [t["fast_p"]["strict"]["1"] or 0.0 for t in turns], "s-", label="fast_1 (strict)")
    ax.plot(x, [t["fast_p"]["at_least"]["1"] or 0.0 for t in turns], "^--", label="fast_1 (at least)")
    ax.plot(x, [t["correct_rate"] or 0.0 for t in summary["at_turn"]], ":", color="gray", label="correct (that turn only)")
    ax.set(xlabel="turn (best so far)", ylabel="fraction", title="Per-turn improvement", ylim=(0, 1.02), xticks=x)
    ax.legend(fontsize=8)
    written.append(_save(fig, directory / "per_turn.png"))

    rows = [[level, str(s["tasks"]), _fmt(s["correct_rate"], True), _fmt(s["fast_p"]["strict"]["1"], True),
             _fmt(s["fast_p"]["at_least"]["1"], True), _speedup(s["geomean_speedup"])]
            for level, s in summary["by_level"].items()]
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.4 * max(1, len(rows))))
    ax.axis("off")
    table = ax.table(cellText=rows, colLabels=["level", "tasks", "correct", "fast_1 (>)", "fast_1 (>=)", "geomean vs eager"],
                     loc="center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.scale(1, 1.6)
    ax.set_title("Per level")
    written.append(_save(fig, directory / "per_level.png"))
    return [str(Path(directory.name) / Path(p).name) for p in written]


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def write_report(trajectories: list[Trajectory], directory: str | Path, title: str = "kernelrl bench") -> dict[str, Any]:
    """Write summary.json, report.md and plots/ into `directory`; returns the summary."""
    directory = Path(directory)
    summary = summarize(trajectories)
    (directory / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    plots = plot(trajectories, summary, directory / "plots") if trajectories else []
    (directory / REPORT).write_text(markdown(summary, title, plots))
    return summary


def compare_markdown(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> str:
    """Two runs' headline metrics side by side (overall, then per turn)."""
    rows_a, rows_b = dict(metric_rows(a["overall"])), dict(metric_rows(b["overall"]))
    labels = list(rows_a) + [k for k in rows_b if k not in rows_a]
    lines = [f"| metric | {name_a} | {name_b} |", "|---|---|---|"]
    lines += [f"| {k} | {rows_a.get(k, '–')} | {rows_b.get(k, '–')} |" for k in labels]
    turns = max(len(a["by_turn"]), len(b["by_turn"]))
    for i in range(turns):
        ta = a["by_turn"][i] if i < len(a["by_turn"]) else None
        tb = b["by_turn"][i] if i < len(b["by_turn"]) else None
        lines.append(f"| correct by turn {i + 1} | {_fmt(ta and ta['correct_rate'], True)} | {_fmt(tb and tb['correct_rate'], True)} |")
    return "\n".join(lines) + "\n"
