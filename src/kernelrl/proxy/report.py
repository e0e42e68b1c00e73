"""Reports of a proxy run: results JSON, a Markdown table, BPB curves as PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kernelrl.proxy.config import BASELINE


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def markdown_table(summary: dict[str, Any]) -> str:
    """The result table plus the facts needed to read it."""
    arms = summary["arms"]
    base = next((a["final_bpb"] for a in arms if a["name"] == BASELINE), None)
    lines = [
        f"# Proxy compression: {summary['preset']}",
        "",
        f"Equal training compute per arm: {summary['budget_flops']:.3g} FLOPs. "
        "Metric: bits per byte on raw validation bytes (lower is better).",
        "",
        "| arm | view | symbols / raw byte | vocab | steps | tokens | raw-byte share of tokens | train FLOPs "
        "| source bytes covered | epochs | val BPB (raw) | vs bytes | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in arms:
        c, m = a["compressor"], a["mix"]
        delta = None if base is None else a["final_bpb"] - base
        produced = m["raw_tokens"] + m["compressed_tokens"] + m["sentinel_tokens"]
        share = m["raw_tokens"] / produced if produced else float("nan")
        lines.append(
            f"| {a['name']} | {c.get('view', '')} | {_fmt(c.get('symbols_per_raw_byte', 1.0), '.3f')} "
            f"| {a['vocab_size']} | {a['steps']} | {a['tokens']:,} | {_fmt(share, '.2f')} | {a['flops']:.3g} "
            f"| {m['source_bytes']:,} "
            f"| {m['epochs']:.2f} | {a['final_bpb']:.4f} | {_fmt(delta, '+.4f')} | {a['wall_seconds']:.0f} |"
        )
    if base is not None:
        better = [a["name"] for a in arms if a["name"] != BASELINE and a["final_bpb"] < base]
        verdict = ", ".join(better) if better else "none"
        lines += ["", f"Arms with lower raw BPB than the byte-only baseline: {verdict}."]
    prep = [a for a in arms if a["compressor"].get("prepare_seconds") is not None]
    if prep:
        lines += ["", "Compressor preparation (not counted in the budget):", ""]
        for a in prep:
            c = a["compressor"]
            extra = ""
            if "m1_train_flops" in c:
                extra = (
                    f", M1 {c['m1_params']:,} params trained {c['m1_train_steps']} steps "
                    f"({c['m1_train_flops']:.3g} FLOPs, final train {c['m1_final_train_bits_per_byte']:.3f} bits/byte)"
                )
            lines.append(
                f"- {a['name']}: {c['prepare_seconds']:.0f} s, round trip on {c['roundtrip_checked_docs']} "
                f"validation docs {'ok' if c['roundtrip_ok'] else 'FAILED'}{extra}"
            )
    ms, me, corpus = summary["machine_start"], summary["machine_end"], summary["corpus"]
    lines += [
        "",
        f"Corpus: {corpus['train_files']} train files ({corpus['train_bytes']:,} bytes), "
        f"{corpus['val_files']} validation files ({corpus['val_eval_bytes']:,} bytes evaluated), split by file.",
        f"Machine: {ms['cpu_count']} CPUs, {ms['torch_threads']} torch threads, load average "
        f"{ms['loadavg_1_5_15'][0]:.2f} at start and {me['loadavg_1_5_15'][0]:.2f} at end; "
        f"total wall time {summary['wall_seconds']:.0f} s, process CPU time "
        f"{summary.get('process_cpu_seconds', float('nan')):.0f} s.",
        "",
    ]
    return "\n".join(lines)


def plot_curves(summary: dict[str, Any], path: Path) -> None:
    """Validation BPB against training FLOPs, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for a in summary["arms"]:
        xs = [p["flops"] for p in a["curve"]]
        ys = [p["val_bpb"] for p in a["curve"]]
        ax.plot(xs, ys, marker="o", label=f"{a['name']} ({a['final_bpb']:.3f})")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation bits per raw byte")
    ax.set_title(f"proxy compression, {summary['preset']}: equal compute")
    finals = [a["final_bpb"] for a in summary["arms"]]
    ax.set_ylim(min(finals) - 0.3, min(8.5, max(max(finals) + 1.5, 3.0)))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_reports(summary: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write results.json, results.md and bpb_curves.png into `out`."""
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "bpb_curves.png"}
    paths["json"].write_text(json.dumps(summary, indent=2, default=float))
    paths["markdown"].write_text(markdown_table(summary))
    plot_curves(summary, paths["plot"])
    return paths
