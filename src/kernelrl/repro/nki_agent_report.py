"""report.md and nki-agent.png of `kernelrl repro nki-agent` (from its results.json alone)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernelrl.agent.nki_mistakes import MISTAKES


def _f(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None or x != x else f"{x:.{digits}f}"


def report(r: dict[str, Any]) -> str:
    c, a, b, g = r["config"], r["tool_use"], r["best_of_n"], r["grpo"]
    lines = [
        "# NKI-Agent at CPU scale (`kernelrl repro nki-agent`)", "",
        "NKI-Agent: (i) tools matter, 6% single-shot vs 77% with compile/verify/profile tools for a strong model;",
        "(ii) GRPO with a binary compile reward does not beat SFT, an execution-based reward does.",
        f"Policy: the scripted `nki-draft` author (mistake rate {c['mistake_rate']} per applicable mistake kind,",
        f"repair success {c['fix_rate']} when the feedback names the mistake), judged by the gym's NKI interpreter.",
        "**Its numbers show the mechanism, not the paper's magnitude**: the rates are set by hand and it can only",
        "write the tasks that ship a reference kernel.", "",
        "## (a) Tool use vs single shot (same policy, same first drafts)", "",
        f"{a['episodes']} episodes per arm ({a['tasks']} tasks, {a['tasks_with_reference']} with a reference kernel, "
        f"{c['samples']} samples each; up to {c['max_tool_calls']} tool calls).", "",
        "| arm | pass rate (all tasks) | pass rate (tasks with a reference) | tool calls / episode |",
        "|---|---|---|---|",
    ]
    for arm in ("single_shot", "tools"):
        d = a[arm]
        lines.append(f"| {arm} | {_f(d['pass_rate'])} | {_f(d['pass_rate_with_reference'])} | {_f(d['tool_calls_mean'], 2)} |")
    lines += ["", "Per level (all tasks): " + "; ".join(
        f"level {lvl}: {_f(a['single_shot']['by_level'][lvl])} -> {_f(a['tools']['by_level'][lvl])}"
        for lvl in a["tools"]["by_level"]),
        f"Episodes solved only with tools: {a['tools_only']}; only single-shot: {a['single_shot_only']}.",
        f"First drafts without a mistake: {_f(a['first_draft_clean'])}; with each kind: "
        + ", ".join(f"{k} {_f(v, 2)}" for k, v in a["first_draft_mistakes"].items()) + ".", "",
        "## (b1) What each reward selects: best of n first drafts", "",
        f"{b['answers']} drafts ({b['n']} per task, {b['tasks']} tasks); {_f(b['answers_correct'])} of them correct.", "",
        "| reward | answer it ranks first is correct | answers with reward > 0 | of them correct |",
        "|---|---|---|---|",
    ]
    for label in ("compile", "execution"):
        d = b[label]
        lines.append(f"| {label} (`{d['reward']}`) | {_f(d['selected_correct'])} | {d['rewarded_answers']} | "
                     f"{_f(d['rewarded_correct'])} |")
    lines += ["", "## (b2) Tiny GRPO on the drafter's mistake logits", "",
              f"{c['rl_steps']} steps x {c['rl_tasks']} tasks x {c['rl_group']} drafts, SGD lr {c['rl_lr']}, one run per "
              f"reward from the same seed and draws; {g['gym_evaluations']} distinct gym evaluations "
              f"({g['cache_hits']} cache hits). Pass / compile rates measured by the gym on {c['eval_samples']} drafts per task.", "",
              "| policy | pass rate | compile rate | expected pass rate | " + " | ".join(f"p({k})" for k in MISTAKES) + " |",
              "|---|---|---|---|" + "---|" * len(MISTAKES)]
    start = g["compile"]["history"]["mistake_p"][0]
    lines.append(f"| SFT start | {_f(g['sft']['pass_rate'])} | {_f(g['sft']['compile_rate'])} | "
                 f"{_f(g['compile']['history']['expected_pass'][0])} | " + " | ".join(_f(p, 2) for p in start) + " |")
    for label in ("compile", "execution"):
        d = g[label]
        lines.append(f"| GRPO, {label} reward | {_f(d['after']['pass_rate'])} | {_f(d['after']['compile_rate'])} | "
                     f"{_f(d['history']['expected_pass'][-1])} | "
                     + " | ".join(_f(d["final_mistake_p"][k], 2) for k in MISTAKES) + " |")
    dc = g["compile"]["after"]["pass_rate"] - g["sft"]["pass_rate"]
    de = g["execution"]["after"]["pass_rate"] - g["sft"]["pass_rate"]
    rose = [k for k in MISTAKES if g["compile"]["final_mistake_p"][k] > start[MISTAKES.index(k)] + 0.05]
    lines += ["", "Expected pass rate: the mean over tasks of the product of (1 - p(kind)) over the kinds that apply, "
              "i.e. the pass rate if every mistake breaks the kernel.", "",
              f"Pass rate change over SFT (measured): compile reward {dc:+.3f}, execution reward {de:+.3f}.", "",
              "Mean reward of the GRPO drafts with and without each mistake (roughly the direction GRPO moves it):", "",
              "| mistake | compile reward: with / without | execution reward: with / without |", "|---|---|---|"]
    for k in MISTAKES:
        cr, er = g["compile"]["kind_reward"][k], g["execution"]["kind_reward"][k]
        lines.append(f"| {k} | {_f(cr['with'], 2)} / {_f(cr['without'], 2)} | {_f(er['with'], 2)} / {_f(er['without'], 2)} |")
    favoured = [k for k in MISTAKES if g["compile"]["kind_reward"][k]["with"] >= g["compile"]["kind_reward"][k]["without"]]
    lines += ["", "The compile reward can only push down the mistakes that fail to compile (partition, psum, missing_load); "
              "missing_store and tiling compile and earn it in full. "
              + (f"Drafts with {', '.join(favoured)} earned at least as much compile reward as drafts without"
                 + (f", and GRPO made {', '.join(rose)} more likely" if rose else "")
                 + ". Checked for missing_store: a level-1 kernel without its `nl.store` also loses the store's value "
                   "expression (all its compute), and with it the compute on HBM a missing `nl.load` breaks on, so it "
                   "compiles. Other cases are not analysed here; these means pool all steps, early and late policies mixed."
                 if favoured else "No mistake earned more compile reward than its absence here."), ""]
    lines += [f"Time: {r['times']['total_s']:.0f} s (tool use {r['times']['tool_use_s']:.0f} s).", ""]
    return "\n".join(lines)


def plot(r: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: a second less to import

    fig = Figure(figsize=(14, 4))
    axes = fig.subplots(1, 3)
    a, b, g = r["tool_use"], r["best_of_n"], r["grpo"]
    levels = list(a["tools"]["by_level"])
    x = range(len(levels))
    axes[0].bar([i - 0.2 for i in x], [a["single_shot"]["by_level"][lv] for lv in levels], 0.4, label="single shot")
    axes[0].bar([i + 0.2 for i in x], [a["tools"]["by_level"][lv] for lv in levels], 0.4, label="with tools")
    axes[0].set_xticks(list(x), [f"level {lv}" for lv in levels])
    axes[0].set_ylabel("pass rate")
    axes[0].set_title("(a) same policy, with and without tools")
    axes[0].legend()
    labels = ["compile", "execution"]
    axes[1].bar(labels, [b[k]["selected_correct"] for k in labels])
    axes[1].set_ylim(0, 1)
    axes[1].set_title(f"(b1) best-of-{b['n']}: selected answer correct")
    for k in labels:
        axes[2].plot(g[k]["history"]["expected_pass"], label=f"{k} reward")
    axes[2].set_xlabel("GRPO step")
    axes[2].set_ylabel("expected pass rate")
    axes[2].set_title("(b2) GRPO on mistake logits")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def write_report(results: dict[str, Any], out: Path) -> None:
    (out / "report.md").write_text(report(results))
    plot(results, out / "nki-agent.png")


def rewrite_report(out: str | Path) -> None:
    """Re-render report.md and the plot from `out`/results.json (no gym)."""
    out = Path(out)
    path = out / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results.json to re-render (run `kernelrl repro nki-agent` first)")
    write_report(json.loads(path.read_text()), out)
