"""`kernelrl serve`: run the evaluation service (HTTP API, durable jobs, local or Ray workers).

Options come from `--config` (a serve config file, YAML/JSON, or JSON text: host, port, ..., and `eval`, the
gym's `EvalConfig` every job starts from; a mapping of `EvalConfig` fields alone is read as `eval`), then
`--set key=value` overrides (e.g. `eval.timing_trials=5`), then the flags given. A config error stops the
command before anything starts, naming the field.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kernelrl.cli.config_args import add_config_arguments, resolve_config

# flags that are `ServeOptions` fields of the same name
FLAGS = ("host", "port", "token", "db", "tasks", "workers", "ray_address", "ray_slots", "max_body_mb", "max_queue",
         "log_level")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the evaluation service over HTTP", description=__doc__)
    p.add_argument("--host", help="bind address (default 127.0.0.1); beyond loopback a token is required")
    p.add_argument("--port", type=int, help="port (default 8321)")
    p.add_argument("--token", help="bearer token clients must send (default: $KERNELRL_SERVE_TOKEN)")
    p.add_argument("--db", help="SQLite job store, jobs survive restarts (default runs/serve/jobs.sqlite)")
    p.add_argument("--tasks", help="task file, directory or dataset; jobs may then name a task by id")
    p.add_argument("--workers", type=int, help="evaluation worker slots of the local pool (default: one per core, or per GPU)")
    p.add_argument("--ray-address", help="run workers as Ray actors: a cluster address, or 'local'")
    p.add_argument("--ray-slots", type=int, help="Ray actors (default: the cluster's GPUs, else its CPUs)")
    p.add_argument("--max-body-mb", type=float, help="largest request body, larger: 413 (default 8)")
    p.add_argument("--max-queue", type=int, help="queued jobs before submissions get 429 (default 100000)")
    p.add_argument("--log-level", help="uvicorn log level (default warning)")
    add_config_arguments(p, "serve config: a YAML/JSON file or JSON text (EvalConfig fields alone: the eval section)")
    p.set_defaults(handler=run)


def options(args: argparse.Namespace) -> Any:
    """The validated `ServeOptions`: --config, then --set, then the flags given."""
    from kernelrl.serve.server import load_options

    return load_options(args.config, args.set, {name: getattr(args, name) for name in FLAGS})


def run(args: argparse.Namespace) -> int:
    from kernelrl.serve.server import ServeConfigError, run_server
    from kernelrl.tasks import TaskError

    opts, status = resolve_config("serve", lambda: options(args), args.print_config,  # never echo the secret:
                                  shown=lambda o: o.model_copy(update={"token": "<set>"}) if o.token else o)
    if status is not None:
        return status
    try:
        opts.check()
        run_server(opts)
    except (ServeConfigError, TaskError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
