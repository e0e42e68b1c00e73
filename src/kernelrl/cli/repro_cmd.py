"""`kernelrl repro TARGET`: reproduce a paper's findings at CPU scale, with a report under a run directory.

Targets: ``drkernel`` (Dr. Kernel: GRPO vs TRLOO trained side by side from one SFT checkpoint per seed,
seeds 0-2, paired differences with a 95% interval and a verdict; on the first three seeds lazy optimisation
with and without PR + PRS at one reward scale for 30 RL steps, paired too; on the first seed the self-inclusion
weight demonstration and sequential test-time scaling; ~20-25 min on 2 cores),
``proxy`` (proxy compression: byte-only vs compressed-view arms vs a tokenizer-only baseline at
equal FLOPs, and at equal steps where the FLOPs buy other steps, over three model sizes and seeds 0-2: the gap
to byte-only against size, paired over seeds; ~10 min a seed on 2 cores),
``nki-agent`` (NKI-Agent with a tiny model trained on the tiny NKI family: compile-verify-fix vs single-shot
best-of-k at equal gym calls and vs no-information feedback, GRPO with the compile vs the execution reward from
one SFT checkpoint per seed; seeds 0-2) and ``direct-opd``
(weak-to-strong Direct-OPD: a weak teacher pair's shift applied to a stronger student, vs step-matched RL
and reverse KL to the teacher, top-K and two sequential shifts; seeds 0-2, ~10 min on 2 cores) and ``cuda-agent``
(CUDA Agent's stages on the ``cuda-agent-tiny`` preset per seed, and the ablation without RFT and critic
pretraining branched from each seed's warm-up checkpoint; paired stage-to-stage and arm differences; ~6 min a seed).
Every target writes ``results.json`` (revision, config, every seed's numbers, wall time) and renders its report
from that file alone; ``--publish`` then copies a finished run's three files over the committed ones in
``src/kernelrl/repro/results/``. `--smoke` runs a seconds-sized version; `key=value` pairs right after the target (or `--set key=value`,
anywhere) override the config.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGETS = ("drkernel", "proxy", "nki-agent", "direct-opd", "cuda-agent")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("repro", help=f"reproduce a paper's findings at CPU scale ({', '.join(TARGETS)})",
                       description=__doc__)
    p.add_argument("target", choices=TARGETS)
    p.add_argument("--out", default=None, help="run directory (default runs/repro-<target>)")
    p.add_argument("--smoke", action="store_true", help="a seconds-sized run (for tests)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1,2; --smoke: 0, proxy --smoke: 0,1)")
    p.add_argument("--print-config", action="store_true", help="print the resolved training config and exit")
    p.add_argument("--report-only", action="store_true", help="re-render report.md and the plot from --out's results.json")
    p.add_argument("--publish", action="store_true",
                   help="copy --out's finished run (results.json, report.md, the plot) over the committed results, no run")
    p.add_argument("--overwrite", action="store_true",
                   help="remove an earlier run's seed directories and results from --out first")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="training config overrides, e.g. rl.steps=4")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="one more override (repeatable)")
    p.add_argument("--lazy-seeds", type=int, default=3, metavar="N",
                   help="drkernel: the first N seeds also run the lazy-optimisation arms (default 3)")
    p.set_defaults(handler=run)


def _out_dir(args: argparse.Namespace) -> str:
    return args.out or f"runs/repro-{args.target}{'-smoke' if args.smoke else ''}"


def _seeds(args: argparse.Namespace) -> tuple[int, ...]:
    """`--seeds` as integers (default 0,1,2; --smoke: 0)."""
    raw = args.seeds or ("0" if args.smoke else "0,1,2")
    try:
        seeds = tuple(int(x) for x in raw.split(","))
    except ValueError:
        raise SystemExit(f"--seeds: expected comma-separated integers, got {raw!r}") from None
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"--seeds: repeated seed in {raw!r}")
    return seeds


def _print_config_or_report(args: argparse.Namespace, cfg: Any, rewrite_report: Callable[[str], Any], out: str) -> bool:
    """`--print-config` (the training config as YAML) or `--report-only`; whether one of them ran."""
    if args.print_config:
        print(cfg.to_yaml())
        return True
    if args.report_only:
        rewrite_report(out)
        print(f"report: {out}/report.md")
        return True
    return False


def earlier_run(out: str | Path) -> list[Path]:
    """What an earlier run left in `out` that a new one would mix with: its per-seed directories (a seed the new
    run does not list would keep its old checkpoints and curves beside the new ones) and its results file."""
    root = Path(out)
    if not root.is_dir():
        return []
    return sorted([*root.glob("seed[0-9]*"), *root.glob("results.json")])


def _fresh_out(args: argparse.Namespace, out: str) -> str | None:
    """None when `out` holds no earlier run (or `--overwrite` removed it); else the error to print."""
    left = earlier_run(out)
    if not left or args.print_config or args.report_only:
        return None
    if not args.overwrite:
        return (f"{out} holds an earlier run ({', '.join(p.name for p in left[:4])}); its seed directories and results "
                "would mix with this run's: pass another --out, or --overwrite")
    for path in left:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return None


#: the committed name of a target's results file where it is not ``<target>.json``
RESULTS_NAME = {"nki-agent": "nki-agent-results.json"}


def publish(target: str, out: str | Path, results_dir: Path | None = None) -> list[Path]:
    """Copy the finished run in `out` (its ``results.json``, ``report.md`` and ``<target>.png``) over the committed
    results of `target` (``<target>.json`` or `RESULTS_NAME`, ``<target>-report.md``, ``<target>.png``) in
    `results_dir` (default: the package's). A run of another target, an unfinished run (no wall time: it stopped
    between seeds) or a missing file is a ValueError naming it, and nothing is copied."""
    import json

    from kernelrl.repro.record import RESULTS_DIR

    run_dir, dest = Path(out), results_dir or RESULTS_DIR
    pairs = [(run_dir / "results.json", dest / RESULTS_NAME.get(target, f"{target}.json")),
             (run_dir / "report.md", dest / f"{target}-report.md"), (run_dir / f"{target}.png", dest / f"{target}.png")]
    record = json.loads(pairs[0][0].read_text()) if pairs[0][0].is_file() else {"repro": target}
    if record.get("repro") != target:
        raise ValueError(f"nothing published: {pairs[0][0]} is a run of {record.get('repro')!r}, not {target!r}")
    missing = [str(src) for src, _ in pairs if not src.is_file()]
    if missing:
        raise ValueError(f"nothing published: {', '.join(missing)} not found (run the target with --out {out} first)")
    if "wall_s" not in record:
        raise ValueError(f"nothing published: {pairs[0][0]} records no wall time (the run stopped before its end)")
    for src, target_path in pairs:
        shutil.copyfile(src, target_path)
    return [target_path for _, target_path in pairs]


def _publish(args: argparse.Namespace, out: str) -> int:
    import sys
    import tomllib

    from kernelrl.repro.record import RESULTS_DIR

    try:
        written = publish(args.target, out)
    except ValueError as exc:
        print(f"kernelrl repro {args.target}: {exc}", file=sys.stderr)
        return 2
    print("published: " + ", ".join(str(p) for p in written))
    known = RESULTS_DIR / "KNOWN_STALE.toml"
    listed = {e.get("file") for e in tomllib.loads(known.read_text()).get("stale", [])} if known.is_file() else set()
    for path in written:
        name = f"src/kernelrl/repro/results/{path.name}"
        if name in listed:
            print(f"KNOWN_STALE.toml lists {name}: delete its entry once this is committed")
    return 0


def run(args: argparse.Namespace) -> int:
    import sys

    out = args.out or f"runs/repro-{args.target}{'-smoke' if args.smoke else ''}"
    if args.publish:
        return _publish(args, out)
    # proxy's models train outside `run_train` (no metrics.jsonl to append to); it writes its record anew
    problem = None if args.target == "proxy" else _fresh_out(args, out)
    if problem:
        print(f"kernelrl repro {args.target}: {problem}", file=sys.stderr)
        return 2
    if args.target == "proxy":
        return run_proxy(args)
    if args.target == "nki-agent":
        return run_nki_agent(args)
    if args.target == "direct-opd":
        return run_direct_opd(args)
    if args.target == "cuda-agent":
        return run_cuda_agent(args)
    from kernelrl.repro.drkernel import LAZY_STEPS, repro_config, rewrite_report, run_drkernel

    cfg = repro_config(args.smoke, [*args.overrides, *args.set])
    out = _out_dir(args)
    if _print_config_or_report(args, cfg, rewrite_report, out):
        return 0
    if args.lazy_seeds < 0:
        print(f"kernelrl repro drkernel: --lazy-seeds must be >= 0, got {args.lazy_seeds}", file=sys.stderr)
        return 2
    try:
        res = run_drkernel(cfg, out, seeds=_seeds(args), lazy_seeds=args.lazy_seeds,
                           lazy_steps=None if args.smoke else LAZY_STEPS)
    except ValueError as exc:
        print(f"kernelrl repro drkernel: {exc}", file=sys.stderr)
        return 2
    lazy = res["lazy_comparison"]
    print(f"lazy share, second half, baseline - PR + PRS: {lazy['mean']:+.3f} over {lazy['n']} seed(s): {lazy['verdict']}")
    c = res["algo_comparison"]
    print(f"TRLOO - GRPO held-out {c['metric']}: {c['mean']:+.3f} over {c['n']} seed(s): {c['verdict']}")
    print(f"report: {out}/report.md ({res['times']['total_s']:.0f} s)")
    return 0


def _run_compared(args: argparse.Namespace, repro_config: Callable[..., Any], run_all: Callable[..., dict[str, Any]],
                  rewrite_report: Callable[[str], Any]) -> int:
    """A repro whose record holds paired ``comparisons`` (nki-agent, cuda-agent): config, run, one line per verdict."""
    import sys

    out = _out_dir(args)
    try:
        cfg = repro_config(args.smoke, [*args.overrides, *args.set])
        if _print_config_or_report(args, cfg, rewrite_report, out):
            return 0
        res = run_all(cfg, out, seeds=_seeds(args))
    except (ValueError, FileNotFoundError) as exc:
        print(f"kernelrl repro {args.target}: {exc}", file=sys.stderr)
        return 2
    for name, c in res["comparisons"].items():
        print(f"{name}: {c['mean']:+.3f} over {c['n']} seed(s): {c['verdict']}")
    print(f"report: {out}/report.md ({res['wall_s']:.0f} s)")
    return 0


def run_nki_agent(args: argparse.Namespace) -> int:
    from kernelrl.repro.nki_agent import repro_config, run_nki_agent
    from kernelrl.repro.nki_agent_report import rewrite_report

    return _run_compared(args, repro_config, run_nki_agent, rewrite_report)


def run_proxy(args: argparse.Namespace) -> int:
    import sys

    from kernelrl.repro.proxy import repro_config, rewrite_report, run_scaling

    out = args.out or f"runs/repro-proxy{'-smoke' if args.smoke else ''}"
    try:
        if args.report_only:
            rewrite_report(out)
            print(f"report: {out}/report.md")
            return 0
        seeds = [f"seeds=[{','.join(str(x) for x in _seeds(args))}]"] if args.seeds else []
        cfg = repro_config(args.smoke, [*seeds, *args.overrides, *args.set])
        if args.print_config:
            print(cfg.to_yaml())
            return 0
        res = run_scaling(cfg, out)
    except (ValueError, FileNotFoundError) as err:
        print(f"kernelrl repro proxy: {err}", file=sys.stderr)
        return 2
    for arm, t in res["trends"].items():
        print(f"{arm}: gap to bytes {t['first']:+.4f} -> {t['last']:+.4f} (smallest -> largest size)")
    for name, c in res["comparisons"].items():
        print(f"{name}: {c['mean']:+.4f} over {c['n']} seed(s): {c['verdict']}")
    print(f"report: {out}/report.md ({res['wall_seconds']:.0f} s wall, {res['process_cpu_seconds']:.0f} s CPU)")
    return 0


def run_direct_opd(args: argparse.Namespace) -> int:
    from kernelrl.repro.direct_opd import repro_config, rewrite_report
    from kernelrl.repro.direct_opd import run_direct_opd as run_all

    cfg = repro_config(args.smoke, [*args.overrides, *args.set])
    out = _out_dir(args)
    if _print_config_or_report(args, cfg, rewrite_report, out):
        return 0
    res = run_all(cfg, out, seeds=_seeds(args))
    s = res["summary"]
    print(f"student before {s['student_before']['sampled_pass_rate']:.3f} sampled pass; after: " + ", ".join(
        f"{arm} {s[arm]['sampled_pass_rate']:.3f} ({s[arm]['sampled_pass_rate_change']:+.3f})"
        for arm in ("direct_opd", "direct_opd_topk", "reverse_kl", "rl", "sequential")))
    print(f"report: {out}/report.md ({res['times']['total_s']:.0f} s)")
    return 0


def run_cuda_agent(args: argparse.Namespace) -> int:
    from kernelrl.repro.cuda_agent import repro_config, run_cuda_agent
    from kernelrl.repro.cuda_agent_report import rewrite_report

    return _run_compared(args, repro_config, run_cuda_agent, rewrite_report)
