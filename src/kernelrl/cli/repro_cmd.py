"""`kernelrl repro TARGET`: reproduce a paper's findings at CPU scale, with a report under a run directory.

Targets: ``drkernel`` (Dr. Kernel: lazy optimisation with and without PR + PRS in hybrid mode, GRPO's
self-inclusion bias vs TRLOO on multi-turn returns, sequential test-time scaling; ~10 min on 2 cores);
``direct-opd`` (weak-to-strong Direct-OPD: a weak teacher pair's shift applied to a stronger student, vs
step-matched RL and reverse KL to the teacher, top-K and two sequential shifts; seeds 0-2, ~15 min).
`--smoke` runs a seconds-sized version; `key=value` pairs right after the target (or `--set key=value`,
anywhere) override the training config.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelrl.train.config import TrainConfig

TARGETS = ("drkernel", "direct-opd")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("repro", help="reproduce a paper's findings at CPU scale (drkernel, direct-opd)",
                       description=__doc__)
    p.add_argument("target", choices=TARGETS)
    p.add_argument("--out", default=None, help="run directory (default runs/repro-<target>)")
    p.add_argument("--smoke", action="store_true", help="a seconds-sized run (for tests)")
    p.add_argument("--seeds", default=None, help="direct-opd: comma-separated seeds (default 0,1,2; --smoke: 0)")
    p.add_argument("--print-config", action="store_true", help="print the resolved training config and exit")
    p.add_argument("--report-only", action="store_true", help="re-render report.md and the plot from --out's results.json")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="training config overrides, e.g. rl.steps=4")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="one more override (repeatable)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.target == "direct-opd":
        from kernelrl.train import repro_direct_opd as mod
    else:
        from kernelrl.train import repro_drkernel as mod  # type: ignore[no-redef]

    cfg = mod.repro_config(args.smoke, [*args.overrides, *args.set])
    if args.print_config:
        print(cfg.to_yaml())
        return 0
    out = args.out or f"runs/repro-{args.target}{'-smoke' if args.smoke else ''}"
    if args.report_only:
        mod.rewrite_report(out)
        print(f"report: {out}/report.md")
        return 0
    if args.target == "direct-opd":
        return _direct_opd(cfg, out, args)
    res = mod.run_drkernel(cfg, out)  # type: ignore[attr-defined]
    a = res["lazy"]
    print("lazy share (first -> last step): " + ", ".join(
        f"{arm} {d['lazy_share'][0]:.2f} -> {d['lazy_share'][-1]:.2f}" for arm, d in a.items() if d["lazy_share"]))
    print(f"report: {out}/report.md ({res['times']['total_s']:.0f} s)")
    return 0


def _direct_opd(cfg: TrainConfig, out: str, args: argparse.Namespace) -> int:
    from kernelrl.train.repro_direct_opd import run_direct_opd

    raw = args.seeds or ("0" if args.smoke else "0,1,2")
    try:
        seeds = tuple(int(x) for x in raw.split(","))
    except ValueError:
        raise SystemExit(f"--seeds: expected comma-separated integers, got {raw!r}") from None
    res = run_direct_opd(cfg, out, seeds=seeds)
    s = res["summary"]
    print(f"student before {s['student_before']['sampled_pass_rate']:.3f} sampled pass; after: " + ", ".join(
        f"{arm} {s[arm]['sampled_pass_rate']:.3f} ({s[arm]['sampled_pass_rate_change']:+.3f})"
        for arm in ("direct_opd", "direct_opd_topk", "reverse_kl", "rl", "sequential")))
    print(f"report: {out}/report.md ({res['times']['total_s']:.0f} s)")
    return 0
