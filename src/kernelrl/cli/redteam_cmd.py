"""`kernelrl redteam`: run the red-team corpus and print what was caught, why, and how fast."""

from __future__ import annotations

import argparse
from pathlib import Path

import kernelrl


def default_corpus() -> Path:
    return Path(kernelrl.__file__).resolve().parents[2] / "tests" / "redteam"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("redteam", help="run the red-team corpus of exploit and legitimate kernels")
    p.add_argument("--corpus", type=Path, default=None, help="corpus directory (cases/ and tasks/); default: tests/redteam")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("-k", "--filter", default="", help="only cases whose name contains this")
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
    outcomes = run_cases(cases, corpus, workers=args.workers)
    table = Table(title=f"red team: {len(outcomes)} cases")
    for column in ("class", "case", "expected", "verdict", "reason", "s", ""):
        table.add_column(column, overflow="fold")
    for o in sorted(outcomes, key=lambda o: (o.case.legit, o.case.cls, o.case.name)):
        mark = "[green]pass[/]" if o.passed else "[red]FAIL[/]"
        table.add_row(o.case.cls, o.case.name, "|".join(sorted(o.case.expect)), str(o.result.status), escape(o.reason), f"{o.seconds:.2f}", mark)
    console = Console(width=200)
    console.print(table)
    exploits = [o for o in outcomes if not o.case.legit]
    legit = [o for o in outcomes if o.case.legit]
    console.print(
        f"exploits caught with the right reason: {sum(o.passed for o in exploits)}/{len(exploits)}; "
        f"legitimate kernels passed: {sum(o.passed for o in legit)}/{len(legit)}"
    )
    return 0 if all(o.passed for o in outcomes) else 1
