"""`kernelrl proxy run`: byte-only baseline vs proxy-compressed training at equal compute."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kernelrl.cli.config_args import add_config_arguments, resolve_config


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("proxy", help="proxy compression: byte-level LMs trained on compressed views")
    sub = parser.add_subparsers(dest="proxy_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda _args: parser.print_help() or 2)
    run = sub.add_parser("run", help="train the byte-only baseline and proxy arms at equal compute")
    # presets: smoke (seconds) or tiny-cpu (about 8 CPU-minutes; 17 min measured on a busy shared 2-core box)
    add_config_arguments(run, "YAML/JSON file laid over the preset", ["smoke", "tiny-cpu"], "tiny-cpu")
    run.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides like --set, e.g. train.lr=1e-3")
    run.add_argument("--out", help="output folder (default runs/proxy/<preset>-<time>)")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from kernelrl.proxy.config import build_config

    cfg, status = resolve_config("proxy run", lambda: build_config(args.preset, args.config, [*args.set, *args.overrides]),
                                 args.print_config)
    if status is not None:
        return status
    from kernelrl.proxy.experiment import run_experiment

    out = Path(args.out or f"runs/proxy/{cfg.preset}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        run_experiment(cfg, out)
    except (ValueError, FileNotFoundError, KeyError) as err:
        print(f"kernelrl proxy run: {err}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the `proxy` command on its own (without the other subcommands' modules)."""
    parser = argparse.ArgumentParser(prog="kernelrl")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["proxy", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
