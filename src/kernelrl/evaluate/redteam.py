"""Run the red-team corpus: exploit candidates that must be caught, legitimate kernels that must pass.

A case is a candidate file whose header says what it is and what verdict it must get:

    # redteam-class: caching            (or `legit`)
    # redteam-expect: rejected|incorrect
    # redteam-task: scaled_relu         (a file in the corpus's tasks/ directory)
    # redteam-reason: stale-output      (a substring of the error; optional)
    # redteam-policy: {"static_severity": {"native-syscalls": "warn"}}   (EvalConfig overrides; optional)
    # redteam-needs: sandbox            (only bubblewrap stops it: skipped where bwrap is missing)
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.pool import EvalPool
from kernelrl.evaluate.result import EvalResult
from kernelrl.tasks.loaders import load_task

SECRET_DIR = "/tmp/kernelrl-redteam-secret"  # exploits try to read this: only the sandbox stops them
BAIT_PORT = 47231  # exploits try to connect here: only the sandbox stops them


@dataclass
class Case:
    name: str
    cls: str
    expect: set[str]
    task: str
    reason: list[str] = field(default_factory=list)
    policy: dict[str, Any] = field(default_factory=dict)
    needs_sandbox: bool = False
    source: str = ""

    @property
    def legit(self) -> bool:
        return self.cls == "legit"


@dataclass
class Outcome:
    case: Case
    result: EvalResult
    seconds: float

    @property
    def passed(self) -> bool:
        status_ok = str(self.result.status) in self.case.expect
        reason_ok = not self.case.reason or any(r.lower() in self.result.error.lower() for r in self.case.reason)
        return status_ok and reason_ok

    @property
    def reason(self) -> str:
        return (self.result.error.splitlines() or [""])[0][:120]


def load_cases(corpus: Path) -> list[Case]:
    cases = []
    for path in sorted((corpus / "cases").glob("*.py")):
        source = path.read_text()
        header = {}
        for line in source.splitlines():
            if not line.startswith("# redteam-"):
                break
            key, _, value = line[len("# redteam-"):].partition(":")
            header[key.strip()] = value.strip()
        missing = {"class", "expect", "task"} - set(header)
        if missing:
            raise ValueError(f"{path}: header lacks redteam-{', redteam-'.join(sorted(missing))}")
        cases.append(Case(
            name=path.stem,
            cls=header["class"],
            expect=set(header["expect"].split("|")),
            task=header["task"],
            reason=[r for r in header.get("reason", "").split("|") if r],
            policy=json.loads(header.get("policy", "{}")),
            needs_sandbox=header.get("needs") == "sandbox",
            source=source,
        ))
    return cases


@contextmanager
def bait() -> Iterator[None]:
    """A secret file and a listening socket that exploits try to reach (only the sandbox keeps them out)."""
    os.makedirs(SECRET_DIR, exist_ok=True)
    Path(SECRET_DIR, "answer").write_text("1.0\n")
    os.chmod(SECRET_DIR, 0o755)
    os.chmod(Path(SECRET_DIR, "answer"), 0o644)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", BAIT_PORT))
    server.listen(16)
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()


def run_cases(cases: list[Case], corpus: Path, workers: int = 2, sandbox: str = "auto") -> list[Outcome]:
    """Evaluate every case with the default policy (plus its overrides); outcomes in case order."""
    tasks = {name: load_task(corpus / "tasks" / f"{name}.py") for name in {c.task for c in cases}}
    base = EvalConfig(timing_trials=5, timing_budget_s=0.2, timeouts={"build": 120, "init": 20, "correctness": 20, "timing": 30})
    outcomes: list[Outcome | None] = [None] * len(cases)
    with bait(), EvalPool(workers=workers, config=base, sandbox=sandbox) as pool:
        started: dict[int, float] = {}
        futures = {}
        for index, case in enumerate(cases):
            policy = dict(case.policy)
            backend = policy.pop("backend", "cpu")
            config = EvalConfig.from_dict({**base.to_dict(), **policy})
            started[index] = time.perf_counter()
            futures[index] = pool.submit(tasks[case.task], Candidate(case.source, backend=backend, id=case.name), config)
        for index, future in futures.items():
            result = future.result()
            outcomes[index] = Outcome(cases[index], result, result.total_s)
    return [o for o in outcomes if o is not None]
