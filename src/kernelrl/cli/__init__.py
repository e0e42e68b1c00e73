"""The `kernelrl` command line. Each subcommand lives in its own module with `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, imported lazily so `kernelrl --help` stays fast.
COMMANDS: dict[str, str] = {
    "bench": "kernelrl.cli.bench_cmd",
    "eval": "kernelrl.cli.eval_cmd",
    "proxy": "kernelrl.cli.proxy_cmd",
    "tasks": "kernelrl.cli.tasks_cmd",
    "redteam": "kernelrl.cli.redteam_cmd",
    "serve": "kernelrl.cli.serve_cmd",
    "train": "kernelrl.cli.train_cmd",
    "distill": "kernelrl.cli.distill_cmd",
    "repro": "kernelrl.cli.repro_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelrl", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMANDS.values():
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
