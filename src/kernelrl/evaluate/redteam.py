"""Run the red-team corpus: exploit candidates that must be caught, legitimate kernels that must pass.

The corpus ships with the package (`CORPUS`: `cases/` and `tasks/`), so `kernelrl redteam` works from a
wheel. A case is a candidate file whose header says what it is and what verdict it must get:

    # redteam-class: caching            (or `legit`)
    # redteam-expect: rejected|incorrect
    # redteam-task: scaled_relu         (a file in the corpus's tasks/ directory)
    # redteam-reason: stale-output      (a substring of the error; optional; `a|b`: either)
    # redteam-policy: {"static_severity": {"native-syscalls": "warn"}}   (EvalConfig overrides; optional)
    # redteam-needs: sandbox            (only bubblewrap stops it: skipped where bwrap is missing)
    # redteam-max-speedup: 1.5          (an `ok` verdict passes only up to this speedup; optional)
    # redteam-feedback-must-not-contain: root:x:0   (nothing a model is shown may hold it; `a|b`: neither)
    # redteam-run: alone                (after all others, in a one-worker pool of its own: it outlives
    #                                    its evaluation or reads what earlier evaluations left behind)
    # redteam-then: probe_planted_files    (implies `run: alone`: that case is evaluated next in the same
    #                                        worker, and must pass its own expectations)
    # redteam-escapes-before: trust-split   (a known escape until that change lands: recorded, reported
    #                                        apart, not judged differently)

A case passes when its status is one of `expect`, the error holds one of `reason` (if any), an `ok` is no
faster than `max-speedup` (if given), no `feedback-must-not-contain` string appears in the error,
feedback, printed output, stage messages or notes, and (for `run: alone` cases) the evaluation right
after it in the same worker slot passes: its `then` case, or else an honest one that must be `ok`.
"""

from __future__ import annotations

import json
import os
import socket
import threading
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

CORPUS = Path(__file__).parent / "redteam_corpus"  # the packaged corpus (cases/ and tasks/)
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
    max_speedup: float | None = None
    must_not_contain: list[str] = field(default_factory=list)
    run_alone: bool = False
    then: str = ""  # the case evaluated right after it in the same worker (implies run_alone)
    escapes_before: str = ""  # the change expected to catch it (a known escape until then)
    source: str = ""

    @property
    def legit(self) -> bool:
        return self.cls == "legit"


@dataclass
class Outcome:
    case: Case
    result: EvalResult
    seconds: float
    after: EvalResult | None = None  # `run: alone` cases: the evaluation that followed in the same slot
    then: Case | None = None  # the case `after` evaluated (None: an honest candidate that must be ok)

    @property
    def passed(self) -> bool:
        status_ok = str(self.result.status) in self.case.expect
        reason_ok = not self.case.reason or any(r.lower() in self.result.error.lower() for r in self.case.reason)
        speedup = self.result.speedup
        speed_ok = self.case.max_speedup is None or self.result.status != "ok" or (
            speedup is not None and speedup <= self.case.max_speedup
        )
        shown = self.shown_text()
        secret_ok = not any(s in shown for s in self.case.must_not_contain)
        after_ok = self.after is None or (
            Outcome(self.then, self.after, 0.0).passed if self.then is not None else self.after.status == "ok")
        return status_ok and reason_ok and speed_ok and secret_ok and after_ok

    @property
    def known_escape(self) -> bool:
        """Failed, as its header says it does until `escapes_before` lands."""
        return bool(self.case.escapes_before) and not self.passed

    def shown_text(self) -> str:
        """Everything of the result that a model can be shown as feedback."""
        r = self.result
        return "\n".join([r.error, r.feedback, r.output_tail, *(s.message for s in r.stages), *r.notes])

    @property
    def reason(self) -> str:
        return (self.result.error.splitlines() or [""])[0][:120]


HEADER_KEYS = {
    "class", "expect", "task", "reason", "policy", "needs", "max-speedup", "feedback-must-not-contain", "run",
    "then", "escapes-before",
}


def load_cases(corpus: Path = CORPUS) -> list[Case]:
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
        unknown = set(header) - HEADER_KEYS
        if unknown:
            raise ValueError(f"{path}: unknown header key redteam-{', redteam-'.join(sorted(unknown))}")
        if header.get("run", "alone") != "alone" or header.get("needs", "sandbox") != "sandbox":
            raise ValueError(f"{path}: redteam-run takes only `alone`, redteam-needs only `sandbox`")
        cases.append(Case(
            name=path.stem,
            cls=header["class"],
            expect=set(header["expect"].split("|")),
            task=header["task"],
            reason=[r for r in header.get("reason", "").split("|") if r],
            policy=json.loads(header.get("policy", "{}")),
            needs_sandbox=header.get("needs") == "sandbox",
            max_speedup=float(header["max-speedup"]) if "max-speedup" in header else None,
            must_not_contain=[s for s in header.get("feedback-must-not-contain", "").split("|") if s],
            run_alone=header.get("run") == "alone" or bool(header.get("then")),
            then=header.get("then", ""),
            escapes_before=header.get("escapes-before", ""),
            source=source,
        ))
    names = {c.name for c in cases}
    for case in cases:
        if case.then and case.then not in names:
            raise ValueError(f"{case.name}: redteam-then names no case {case.then!r}")
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


def run_cases(cases: list[Case], corpus: Path = CORPUS, workers: int = 2, sandbox: str = "auto") -> list[Outcome]:
    """Evaluate every case with the default policy (plus its overrides); outcomes in case order.

    Cases marked `run: alone` go last, each in a one-worker pool of its own (closed before the next),
    so what they leave behind (a process that outlives its evaluation) reaches no other case."""
    named = {c.name: c for c in load_cases(corpus)} if any(c.then for c in cases) else {}
    follow_ups = {c.then: named[c.then] for c in cases if c.then}
    tasks = {name: load_task(corpus / "tasks" / f"{name}.py")
             for name in {c.task for c in [*cases, *follow_ups.values()]}}
    base = EvalConfig(timing_trials=5, timing_budget_s=0.2, timeouts={"build": 120, "init": 20, "correctness": 20, "timing": 30})
    outcomes: dict[int, Outcome] = {}

    def evaluate(indices: list[int], pool_workers: int, check_after: bool = False) -> None:
        with EvalPool(workers=pool_workers, config=base, sandbox=sandbox) as pool:
            futures = {}
            for index in indices:
                case = cases[index]
                policy = dict(case.policy)
                backend = policy.pop("backend", "cpu")
                config = EvalConfig.from_dict({**base.to_dict(), **policy})
                futures[index] = pool.submit(tasks[case.task], Candidate(case.source, backend=backend, id=case.name), config)
            for index, future in futures.items():
                result = future.result()
                outcomes[index] = Outcome(cases[index], result, result.total_s)
            if check_after:  # the next evaluation in the same worker slot must be unaffected
                outcome = outcomes[indices[0]]
                if outcome.case.then:
                    outcome.then = then = follow_ups[outcome.case.then]
                    policy = dict(then.policy)
                    backend = policy.pop("backend", "cpu")
                    outcome.after = pool.evaluate(
                        tasks[then.task], Candidate(then.source, backend=backend, id=then.name),
                        EvalConfig.from_dict({**base.to_dict(), **policy}))
                else:
                    task = tasks[outcome.case.task]
                    honest = Candidate(task.source + "\n\nModelNew = Model\n", id="after")
                    outcome.after = pool.evaluate(task, honest, EvalConfig.from_dict(
                        {**base.to_dict(), "guards": False, "static_severity": {"*": "warn"}}))

    shared = [i for i, c in enumerate(cases) if not c.run_alone]
    with bait():
        if shared:
            evaluate(shared, workers)
        for index in (i for i, c in enumerate(cases) if c.run_alone):
            evaluate([index], 1, check_after=True)
    return [outcomes[i] for i in range(len(cases)) if i in outcomes]
