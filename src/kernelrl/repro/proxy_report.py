"""report.md and proxy.png of `kernelrl repro proxy`, rendered from its results.json data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelrl.proxy.config import BASELINE, TOKENS_ONLY
from kernelrl.repro.stats import verdict_line


def _size_name(s: dict[str, Any]) -> str:
    return f"d{s['d_model']} x {s['n_layers']}L ({s['non_embedding_params']:,})"


def _verdict(arm: str, t: dict[str, Any], sizes: list[dict[str, Any]]) -> str:
    side = "in the arm's favour" if t["favours_arm_as_size_grows"] else "against the arm"
    wins = [_size_name(sizes[i]).split(" (")[0] for i in t["better_than_bytes_at"]]
    won = f"beats byte-only at {', '.join(wins)}" if wins else "beats byte-only at no size"
    shape = "monotonically" if t["monotone"] else "not monotonically"
    if (t["first"] < 0) != (t["last"] < 0):
        size = "crosses zero"
    else:
        size = "shrinks" if abs(t["last"]) < abs(t["first"]) else "grows"
    return (
        f"- **{arm}**: gap {t['first']:+.4f} at the smallest size -> {t['last']:+.4f} at the largest "
        f"(change {t['change']:+.4f}, {t['slope_per_decade']:+.4f} per 10x params, {shape}): the gap "
        f"{size}, moving {side} as the model grows; {won}."
    )


def _equal_steps_note(r: dict[str, Any]) -> list[str]:
    arms = r.get("equal_step_arms") or []
    if not arms:
        return []
    return [f"**Equal steps.** At equal FLOPs a bigger vocabulary's head buys fewer steps, and its share of the "
            f"FLOPs shrinks as the model grows, which alone narrows a gap; so {', '.join(arms)} also train at the "
            "byte-only arm's steps (`<arm> @steps`; where the FLOPs already bought those steps the run is the same).", ""]


def _comparison_lines(r: dict[str, Any]) -> list[str]:
    """One verdict line per paired comparison (a record without them: one seed, no intervals)."""
    comparisons = r.get("comparisons") or {}
    if not comparisons:
        return ["One seed per cell: no intervals, and differences of a few hundredths of a bit are within noise."]
    claims = {"gain grows": "{arm} gains on byte-only as the model grows (gap at the smallest size minus at the largest)",
              "vs tokenizer-only": "{arm} rivals the tokenizer-only model at the largest size (its BPB minus the arm's)"}
    lines = []
    for name, summary in comparisons.items():
        arm, _, kind = name.partition(": ") if ": " in name else name.partition(" vs ")
        claim = claims["gain grows" if kind == "gain grows" else "vs tokenizer-only"].format(arm=arm)
        lines.append(verdict_line(claim, summary, " BPB"))
    return lines


def report(r: dict[str, Any]) -> str:
    """The Markdown report: setup, BPB and gap tables, the direction of each gap, time and machine."""
    sizes, arms, cfg = r["sizes"], r["arms"], r["config"]
    tr, c = cfg["train"], r["corpus"]
    lines = [
        "# Proxy compression at CPU scale: does the gain grow with model size?",
        "",
        "Claim under test (proxy compression, Zheng et al. 2026): byte-level LMs trained mostly on "
        "compressed views of their text (plus raw bytes) gain more over byte-only training as models "
        "grow, and rival tokenizer-based models. Compressed views: gzip, a BPE tokenizer "
        f"({cfg['tokenizer']['vocab_size']} ids) and neural arithmetic coding with equal-information windows "
        "(Lester et al. 2024).",
        "",
        "**Equal compute.** At each size every arm gets the same training FLOPs: "
        f"{tr['budget_tokens']:,} tokens priced at the byte-only model's FLOPs per token at that size "
        "(6 x non-lookup parameters, output head included, + 6 x layers x context x width; the input "
        "embedding lookup is free). An arm whose model costs more per token (a bigger vocabulary head) "
        "takes fewer steps. Compressor preparation (BPE training, the arithmetic coder's model, encoding) "
        "is not counted, as in Lester et al. (2024). Budgets grow with size.",
        "",
        "**Metric.** Bits per raw validation byte (lower is better), every validation byte once. Byte "
        "arms predict raw bytes inside `<raw>` segments. The tokenizer-only arm (a model trained only on "
        "the tokenizer's ids) is scored as the total NLL of the validation text's token ids, in bits, "
        "divided by the number of raw bytes of that text (document sentinels are scored in neither kind "
        "of arm). **Gap** = arm BPB - byte-only BPB "
        "(negative: the arm beats byte-only).",
        "",
        f"**Seeds.** {len(r.get('seed_list', [0]))} training seed(s) ({', '.join(str(x) for x in r.get('seed_list', [0]))}): "
        "each trains every arm at every size from its own initialisation and data order; the corpus, the split and "
        "the compressors are the same for all. Tables show means over the seeds.",
        "",
        *_equal_steps_note(r),
        "| size (non-embedding params) | budget FLOPs | " + " | ".join(arms) + " |",
        "|---|---|" + "---|" * len(arms),
    ]
    for i, s in enumerate(sizes):
        cells = [f"{r['bpb'][a][i]:.4f}" for a in arms]
        lines.append(f"| {_size_name(s)} | {s['budget_flops']:.3g} | " + " | ".join(cells) + " |")
    gap_arms = [a for a in arms if a != BASELINE]
    lines += ["", "Gap to byte-only (BPB):", "", "| size | " + " | ".join(gap_arms) + " |",
              "|---|" + "---|" * len(gap_arms)]
    for i, s in enumerate(sizes):
        lines.append(f"| {_size_name(s)} | " + " | ".join(f"{r['gaps'][a][i]:+.4f}" for a in gap_arms) + " |")
    lines += ["", "Steps per arm and the raw text they covered in any view (same FLOPs; the tokenizer "
              "vocabulary costs head FLOPs, compressed views cover more text per token):", "",
              "| size | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for s in sizes:
        done = {a["name"]: f"{a['steps']} ({a['mix']['source_bytes'] / 1e3:,.0f} kB)" for a in s["arms"]}
        lines.append(f"| {_size_name(s)} | " + " | ".join(done[a] for a in arms) + " |")
    lines += ["", "## Direction of the effect", ""]
    lines += [_verdict(a, r["trends"][a], sizes) for a in gap_arms if a in r["trends"]]
    proxies = [a for a in gap_arms if not a.startswith(TOKENS_ONLY)]
    if TOKENS_ONLY in arms and proxies:
        last = len(sizes) - 1
        best = min(proxies, key=lambda a: r["bpb"][a][last])
        diff = r["bpb"][best][last] - r["bpb"][TOKENS_ONLY][last]
        rel = "below" if diff < 0 else "above"
        lines += ["", f"At the largest size the best proxy arm ({best}, {r['bpb'][best][last]:.4f}) is "
                  f"{abs(diff):.4f} BPB {rel} the tokenizer-only baseline ({r['bpb'][TOKENS_ONLY][last]:.4f})."]
    lines += ["", "## Paired over seeds", "", *_comparison_lines(r)]
    lines += [
        "",
        "The models are tiny and briefly trained, far below the scales the claim is about.",
        "",
        "![BPB and gap against model size](proxy.png)",
        "",
    ]
    ms, me = r["machine_start"], r["machine_end"]
    prep = {a["name"]: a["compressor"].get("prepare_seconds") for a in sizes[0]["arms"] if a["name"] != TOKENS_ONLY}
    prep_txt = ", ".join(f"{k} {v:.0f} s" for k, v in prep.items() if v is not None)
    lines += [
        f"Corpus: {c['train_files']} train files ({c['train_bytes']:,} bytes, documents of at most "
        f"{cfg['corpus']['chunk_bytes']} bytes), {c['val_files']} validation files "
        f"({c['val_eval_bytes']:,} bytes evaluated), split by file. Context {tr['seq_len']}, batch "
        f"{tr['batch_size']}, lr {tr['lr']}, mix p(compressed) {cfg['mix']['p_compressed']}.",
        f"Preparation (once, shared by all sizes; {TOKENS_ONLY} reuses the tokenizer's): {prep_txt}.",
        f"Machine: {ms['cpu_count']} CPUs, {ms['torch_threads']} torch thread(s), load average "
        f"{ms['loadavg_1_5_15'][0]:.2f} at start and {me['loadavg_1_5_15'][0]:.2f} at end (shared). "
        f"Total wall time {r['wall_seconds']:.0f} s, process CPU time {r['process_cpu_seconds']:.0f} s.",
        "",
    ]
    return "\n".join(lines)


def plot(r: dict[str, Any], path: Path) -> None:
    """Left: raw BPB against non-embedding params; right: gap to byte-only against params."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    xs = [s["non_embedding_params"] for s in r["sizes"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, arm in enumerate(r["arms"]):
        color = f"C{i}"  # one colour per arm in both panels
        left.plot(xs, r["bpb"][arm], marker="o", color=color, label=arm)
        if arm != BASELINE:
            right.plot(xs, r["gaps"][arm], marker="o", color=color, label=arm)
    right.axhline(0.0, color="C0", linewidth=1, linestyle="--", label=f"{BASELINE} (byte-only)")
    for ax, ylabel in ((left, "bits per raw validation byte"), (right, "gap: arm BPB - byte-only BPB")):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # label the sizes only; minor labels overlap
        ax.set_xticks(xs, [f"{x:,}" for x in xs])
        ax.set_xlabel("non-embedding parameters")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    left.set_title("raw-byte BPB at equal FLOPs per size")
    right.set_title("below 0: the arm beats byte-only")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
