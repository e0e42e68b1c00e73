"""Run a policy over a suite: every (task, sample) episode concurrently against the pool, resumable."""

from __future__ import annotations

import queue
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from kernelrl.agent.episode import EpisodeConfig, run_episode
from kernelrl.agent.policies.base import Policy
from kernelrl.agent.records import Trajectory
from kernelrl.bench.store import RunStore
from kernelrl.config_system import ConfigModel, load
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.pool import EvalPool
from kernelrl.tasks.task import Task

# Settings that must match for a restart to continue a run rather than mix two runs.
RESUME_KEYS = ("policy", "episode", "eval")


class ResumeMismatch(ValueError):
    """The output directory holds a run with different settings."""


class BenchPolicyConfig(ConfigModel):
    """The policy `kernelrl bench` builds (its flags of the same names set these): a registered policy
    `name` and the settings of the endpoint or local model it talks to."""

    name: str = "scripted"  # openai | transformers | scripted | nki-draft | another registered policy
    model: str | None = None  # model name (openai) or local path (transformers)
    base_url: str | None = None  # OpenAI-compatible endpoint
    api_key_env: str = "OPENAI_API_KEY"  # the environment variable holding the key (never the key itself)
    answers: str | None = None  # scripted: answers file, directory, or an earlier results.jsonl
    temperature: float = Field(0.0, ge=0)
    max_tokens: int = Field(4096, ge=1)  # tokens per model answer
    max_concurrency: int = Field(8, ge=1)  # requests in flight to the endpoint
    max_batch: int = Field(8, ge=1)  # transformers: requests generated together
    retries: int = Field(4, ge=0)  # per request, exponential backoff
    request_timeout: float = Field(300.0, gt=0)  # seconds per request


class BenchConfig(ConfigModel):
    """One benchmark run: how many samples per task, the episode settings, the evaluation settings, the
    policy to build (used by the CLI; `run_bench` takes the policy object).

    Loads like every config (`kernelrl.config_system.load`): a YAML/JSON file, then dotted overrides."""

    samples: int = Field(1, ge=1)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    concurrency: int = Field(8, ge=1)  # episodes in flight (the pool and the policy bound the real parallelism)
    suite: str = ""
    policy: BenchPolicyConfig = Field(default_factory=BenchPolicyConfig)

    @classmethod
    def from_file(cls, path: str | Path, overrides: list[str] | None = None) -> BenchConfig:
        """Load a YAML (or JSON) bench config, then `overrides` (``episode.max_turns=2``)."""
        return load(cls, path=path, overrides=overrides, source="bench config")


@dataclass
class BenchRun:
    """What `run_bench` did: all trajectories of the run (old and new) and how many it ran now."""

    directory: Path
    trajectories: list[Trajectory]
    ran: int
    skipped: int
    interrupted: bool = False
    errors: int = 0  # episodes that raised (not recorded; a restart retries them)


def _check_resume(store: RunStore, config: dict[str, Any]) -> None:
    previous = store.read_config()
    if previous is None:
        return
    changed = [k for k in RESUME_KEYS if _comparable(previous.get(k), k) != _comparable(config.get(k), k)]
    if changed:
        raise ResumeMismatch(
            f"{store.dir} holds a run with different {', '.join(changed)}; use another --out directory"
        )


def _comparable(value: Any, key: str) -> Any:
    if key == "eval" and isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in ("num_threads",)}
    return value


def run_bench(
    tasks: list[Task],
    policy: Policy,
    out_dir: str | Path,
    config: BenchConfig | None = None,
    pool: EvalPool | None = None,
    workers: int | None = None,
    progress: bool = True,
) -> BenchRun:
    """Run `samples` episodes per task, appending each finished trajectory to `out_dir/results.jsonl`.

    A restart with the same settings skips every (task, sample) already recorded; more samples than
    before only runs the new ones. Ctrl-C stops scheduling, keeps what finished, and returns at once
    (episodes still in flight are abandoned and run again on the next start). An episode that fails
    with an unexpected error is reported and left unrecorded, so a restart retries it.
    """
    config = config or BenchConfig()
    store = RunStore(out_dir)
    settings = config.to_dict()
    run_config = {**settings, "policy": getattr(policy, "name", type(policy).__name__),
                  "policy_settings": settings["policy"], "tasks": [t.id for t in tasks]}
    _check_resume(store, run_config)
    store.write_config(run_config)
    wanted = {(t.id, s) for t in tasks for s in range(config.samples)}
    done = store.done() & wanted
    todo: queue.Queue[tuple[Task, int]] = queue.Queue()
    for task in tasks:
        for sample in range(config.samples):
            if (task.id, sample) not in done:
                todo.put((task, sample))
    total = todo.qsize()
    own_pool = pool is None
    pool = pool or EvalPool(workers=workers, config=config.eval)
    finished: queue.Queue[tuple[str, int, Trajectory | BaseException]] = queue.Queue()
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            try:
                task, sample = todo.get_nowait()
            except queue.Empty:
                return
            try:
                outcome: Trajectory | BaseException = run_episode(task, policy, pool, config.episode, sample, config.eval)
            except Exception as exc:  # a bug or a closed pool: report, leave unrecorded for a retry
                outcome = exc
            finished.put((task.id, sample, outcome))

    threads = [threading.Thread(target=work, daemon=True, name=f"bench-episode-{i}")
               for i in range(max(1, min(config.concurrency, total)))]
    bar = _progress_bar(total, len(done), progress)
    ran, correct, errors, interrupted = 0, 0, 0, False
    try:
        for thread in threads:
            thread.start()
        for _ in range(total):
            task_id, sample, outcome = finished.get()
            if isinstance(outcome, BaseException):
                errors += 1
                print(f"\nepisode {task_id} sample {sample} failed: {outcome!r}", file=sys.stderr)
            else:
                store.append(outcome)
                ran += 1
                correct += outcome.best_turn is not None
            bar.update(1)
            bar.set_postfix(correct=f"{correct}/{ran}")
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: finished episodes are saved; run the same command again to resume", file=sys.stderr)
    finally:
        stop.set()
        bar.close()
        if own_pool:  # after Ctrl-C, close in the background: evaluations in flight are abandoned
            closer = threading.Thread(target=pool.close, daemon=True)
            closer.start()
            if not interrupted:
                closer.join()
    trajectories = [t for t in store.load() if (t.task_id, t.sample) in wanted]
    return BenchRun(store.dir, trajectories, ran=ran, skipped=len(done), interrupted=interrupted, errors=errors)


def _progress_bar(total: int, already: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=f"episodes (resumed: {already} done)" if already else "episodes",
                unit="ep", disable=not enabled, dynamic_ncols=True, file=sys.stderr)

