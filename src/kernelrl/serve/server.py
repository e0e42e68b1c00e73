"""Build and run the service: options -> store, executor, tasks -> FastAPI app -> uvicorn."""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.evaluate import EvalConfig

TOKEN_ENV = "KERNELRL_SERVE_TOKEN"
DEFAULT_PORT = 8321


class ServeConfigError(ValueError):
    """The server was asked to start in a way it refuses (e.g. public without a token)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    db: str = "runs/serve/jobs.sqlite"
    tasks: str | None = None
    workers: int | None = None
    ray_address: str | None = None
    ray_slots: int | None = None
    max_body_mb: float = 8.0
    max_queue: int = 100_000
    config: dict[str, Any] = field(default_factory=dict)  # EvalConfig overrides
    log_level: str = "warning"

    def resolved_token(self) -> str | None:
        return self.token or os.environ.get(TOKEN_ENV) or None

    def check(self) -> None:
        if not is_loopback(self.host) and not self.resolved_token():
            raise ServeConfigError(
                f"refusing to bind {self.host}: binding beyond loopback requires an auth token "
                f"(--token or the environment variable {TOKEN_ENV})"
            )
        if self.max_body_mb <= 0 or self.max_queue < 1:
            raise ServeConfigError("--max-body-mb must be > 0 and --max-queue >= 1")


def parse_config(text: str | None) -> dict[str, Any]:
    """EvalConfig overrides from a JSON string or a JSON/YAML file."""
    if not text:
        return {}
    path = Path(text)
    if path.is_file():
        import yaml

        data = yaml.safe_load(path.read_text())
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ServeConfigError("--config must be a JSON object or a file holding one")
    return data


def build_app(options: ServeOptions) -> Any:
    """The app with its service started (store opened, jobs re-queued, workers warm)."""
    from kernelrl.serve.app import create_app
    from kernelrl.serve.executors import make_executor
    from kernelrl.serve.service import Service, load_task_dir, merge_config
    from kernelrl.serve.store import JobStore

    options.check()
    config = merge_config(EvalConfig(), options.config)
    tasks = load_task_dir(options.tasks)
    store = JobStore(options.db)
    if options.ray_address:
        executor = make_executor("ray", ray_address=options.ray_address, slots=options.ray_slots or options.workers,
                                 config=config)
    else:
        executor = make_executor("local", workers=options.workers, config=config)
    service = Service(store, executor, tasks=tasks, config=config, max_queue=options.max_queue)
    return create_app(service, token=options.resolved_token(), max_body=int(options.max_body_mb * 2**20))


def run_server(options: ServeOptions) -> None:
    import uvicorn

    app = build_app(options)
    service = app.state.service
    print(
        f"kernelrl serve: http://{options.host}:{options.port}  executor={service.executor.name} "
        f"slots={service.executor.capacity} tasks={len(service.tasks)} db={options.db} "
        f"requeued={service.requeued} auth={'on' if options.resolved_token() else 'off'}",
        flush=True,
    )
    uvicorn.run(app, host=options.host, port=options.port, log_level=options.log_level, timeout_keep_alive=30)
