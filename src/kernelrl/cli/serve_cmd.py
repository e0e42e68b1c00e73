"""`kernelrl serve`: run the evaluation service (HTTP API, durable jobs, local or Ray workers)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the evaluation service over HTTP", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="bind address; beyond loopback a token is required")
    p.add_argument("--port", type=int, default=8321)
    p.add_argument("--token", help="bearer token clients must send (default: $KERNELRL_SERVE_TOKEN)")
    p.add_argument("--db", default="runs/serve/jobs.sqlite", help="SQLite job store (jobs survive restarts)")
    p.add_argument("--tasks", help="task file, directory or dataset; jobs may then name a task by id")
    p.add_argument("--workers", type=int, help="evaluation worker slots of the local pool (default: one per core, or per GPU)")
    p.add_argument("--ray-address", help="run workers as Ray actors: a cluster address, or 'local'")
    p.add_argument("--ray-slots", type=int, help="Ray actors (default: the cluster's GPUs, else its CPUs)")
    p.add_argument("--max-body-mb", type=float, default=8.0, help="largest request body (larger: 413)")
    p.add_argument("--max-queue", type=int, default=100_000, help="queued jobs before submissions get 429")
    p.add_argument("--config", help="EvalConfig defaults: a JSON object or a JSON/YAML file")
    p.add_argument("--log-level", default="warning")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from kernelrl.serve.server import ServeConfigError, ServeOptions, parse_config, run_server
    from kernelrl.tasks import TaskError

    try:
        options = ServeOptions(
            host=args.host, port=args.port, token=args.token, db=args.db, tasks=args.tasks, workers=args.workers,
            ray_address=args.ray_address, ray_slots=args.ray_slots, max_body_mb=args.max_body_mb,
            max_queue=args.max_queue, config=parse_config(args.config), log_level=args.log_level,
        )
        options.check()
        run_server(options)
    except (ServeConfigError, TaskError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
