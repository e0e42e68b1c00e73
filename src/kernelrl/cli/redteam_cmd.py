"""`kernelrl redteam`: run the red-team corpus and print what was caught, why, and how fast."""

from __future__ import annotations

import argparse
from pathlib import Path


def default_corpus() -> Path:
    """The corpus shipped inside the package (works from a wheel install too)."""
    from kernelrl.evaluate.redteam import CORPUS

    return CORPUS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("redteam", help="run the red-team corpus of exploit and legitimate kernels")
    p.add_argument("--corpus", type=Path, default=None,
                   help="corpus directory (cases/ and tasks/); default: the one shipped in kernelrl.evaluate")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("-k", "--filter", default="", help="only cases whose name contains this")
    p.add_argument("--strict", action="store_true",
                   help="fail on known escapes too (cases marked `redteam-escapes-before`)")
    p.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                   help="run the workers under bubblewrap (auto: where it works) or without it (none)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from kernelrl.evaluate.redteam import load_cases, run_cases

    corpus = args.corpus or default_corpus()
    if not (corpus / "cases").is_dir():
        print(f"error: no red-team corpus at {corpus} (expected cases/ and tasks/); pass --corpus")
        return 2
    cases = [c for c in load_cases(corpus) if args.filter in c.name]
    if args.sandbox == "none":
        cases = [c for c in cases if not c.needs_sandbox]
    outcomes = run_cases(cases, corpus, workers=args.workers, sandbox=args.sandbox)
    table = Table(title=f"red team: {len(outcomes)} cases")
    for column in ("class", "case", "expected", "verdict", "speedup", "reason", "s", ""):
        table.add_column(column, overflow="fold")
    for o in sorted(outcomes, key=lambda o: (o.case.legit, o.case.cls, o.case.name)):
        if o.passed:
            mark = "[green]pass[/]"
        elif o.known_escape:
            mark = f"[yellow]escapes (until {escape(o.case.escapes_before)})[/]"
        else:
            mark = "[red]FAIL[/]"
        speedup = o.result.speedup
        verdict = str(o.result.status) + ("" if o.after is None else f" (then {o.after.status})")
        table.add_row(o.case.cls, o.case.name, "|".join(sorted(o.case.expect)), verdict,
                      "" if speedup is None else f"{speedup:.2f}", escape(o.reason), f"{o.seconds:.2f}", mark)
    console = Console(width=200)
    console.print(table)
    exploits = [o for o in outcomes if not o.case.legit]
    legit = [o for o in outcomes if o.case.legit]
    known = [o for o in outcomes if o.known_escape]
    console.print(
        f"exploits caught with the right reason: {sum(o.passed for o in exploits)}/{len(exploits)}; "
        f"legitimate kernels passed: {sum(o.passed for o in legit)}/{len(legit)}; "
        f"known escapes (marked redteam-escapes-before): {len(known)}"
    )
    failed = [o for o in outcomes if not o.passed and (args.strict or not o.known_escape)]
    return 1 if failed else 0
