"""A real `kernelrl serve` for the integration tests, used through the module-level default client."""

from __future__ import annotations

import pytest

from kernelrl.integrations.scoring import set_default_client
from kernelrl.serve.client import ServeClient
from tests.serve.helpers import TASK, ServerProcess


@pytest.fixture(scope="package")
def service(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("integrations")
    tasks = tmp / "tasks"
    tasks.mkdir()
    (tasks / "relu.py").write_text(TASK["source"])
    config = '{"measure_timing": false, "correctness_trials": 1}'
    proc = ServerProcess(tmp / "jobs.sqlite", "--workers", "2", "--tasks", str(tasks), "--config", config).start()
    client = ServeClient(proc.url, max_concurrency=4)
    set_default_client(client)
    yield client
    set_default_client(None)
    client.close()
    proc.stop()
