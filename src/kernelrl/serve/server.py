"""Build and run the service: options -> store, executor, tasks -> FastAPI app -> uvicorn."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from kernelrl.config_system import ConfigError, ConfigModel, merge, parse_overrides, read_file, validate
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


class ServeOptions(ConfigModel):
    """How the service runs; `eval` is the gym's own `EvalConfig`, the defaults every job starts from.

    Loads like every config (`load_options`): a YAML/JSON file or JSON text, dotted overrides, flags."""

    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    token: str | None = None
    db: str = "runs/serve/jobs.sqlite"
    tasks: str | None = None
    workers: int | None = Field(None, ge=1)
    ray_address: str | None = None
    ray_slots: int | None = Field(None, ge=1)
    max_body_mb: float = Field(8.0, gt=0)
    max_queue: int = Field(100_000, ge=1)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "warning"

    def resolved_token(self) -> str | None:
        return self.token or os.environ.get(TOKEN_ENV) or None

    def check(self) -> None:
        if not is_loopback(self.host) and not self.resolved_token():
            raise ServeConfigError(
                f"refusing to bind {self.host}: binding beyond loopback requires an auth token "
                f"(--token or the environment variable {TOKEN_ENV})"
            )


def parse_config(text: str | None) -> dict[str, Any]:
    """A mapping from a JSON/YAML file or JSON text (``--config``); ``{}`` for none."""
    if not text:
        return {}
    if Path(text).is_file():
        return read_file(text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError([f"--config: neither a file nor JSON text: {exc}"], "serve config") from None
    if not isinstance(data, dict):
        raise ConfigError(["--config: must be a JSON object or a file holding one"], "serve config")
    return data


def load_options(config: str | None = None, overrides: list[str] | None = None,
                 flags: dict[str, Any] | None = None) -> ServeOptions:
    """`ServeOptions` from ``--config`` (a serve config; a mapping of `EvalConfig` fields alone, the earlier
    form, is its `eval` section), then dotted `overrides`, then the `flags` given; validated once."""
    data = parse_config(config)
    if data and not set(data) & set(ServeOptions.model_fields) and set(data) <= set(EvalConfig.model_fields):
        data = {"eval": data}
    origin = config if config and Path(config).is_file() else "the --config JSON"
    stack = [(origin, data, True)] if data else []
    data = merge(merge(data, parse_overrides(list(overrides or []))),
                 {k: v for k, v in (flags or {}).items() if v is not None})
    return validate(ServeOptions, data, "serve config", stack)


def build_app(options: ServeOptions) -> Any:
    """The app with its service started (store opened, jobs re-queued, workers warm)."""
    from kernelrl.serve.app import create_app
    from kernelrl.serve.executors import make_executor
    from kernelrl.serve.service import Service, load_task_dir
    from kernelrl.serve.store import JobStore

    options.check()
    config = options.eval
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
