"""Run a policy over a suite: every (task, sample) episode concurrently against the pool, resumable."""

from __future__ import annotations

import concurrent.futures as cf
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.agent.episode import EpisodeConfig, run_episode
from kernelrl.agent.policies.base import Policy
from kernelrl.agent.records import Trajectory
from kernelrl.bench.store import RunStore
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.pool import EvalPool
from kernelrl.tasks.task import Task

# Settings that must match for a restart to continue a run rather than mix two runs.
RESUME_KEYS = ("policy", "episode", "eval")


class ResumeMismatch(ValueError):
    """The output directory holds a run with different settings."""


@dataclass
class BenchConfig:
    """One benchmark run: how many samples per task, the episode settings, the evaluation settings."""

    samples: int = 1
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    concurrency: int = 8  # episodes in flight (the pool and the policy bound the real parallelism)
    suite: str = ""

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError("samples must be >= 1")
        if isinstance(self.episode, dict):
            self.episode = EpisodeConfig(**self.episode)
        if isinstance(self.eval, dict):
            self.eval = EvalConfig.from_dict(self.eval)

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "episode": self.episode.to_dict(), "eval": self.eval.to_dict(),
                "concurrency": self.concurrency, "suite": self.suite}


@dataclass
class BenchRun:
    """What `run_bench` did: all trajectories of the run (old and new) and how many it ran now."""

    directory: Path
    trajectories: list[Trajectory]
    ran: int
    skipped: int
    interrupted: bool = False


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
    before only runs the new ones. Ctrl-C stops scheduling, keeps what finished, and returns.
    """
    config = config or BenchConfig()
    store = RunStore(out_dir)
    run_config = {"policy": getattr(policy, "name", type(policy).__name__), **config.to_dict(),
                  "tasks": [t.id for t in tasks]}
    _check_resume(store, run_config)
    store.write_config(run_config)
    done = store.done()
    todo = [(task, s) for task in tasks for s in range(config.samples) if (task.id, s) not in done]
    own_pool = pool is None
    pool = pool or EvalPool(workers=workers, config=config.eval)
    bar = _progress_bar(len(todo), len(done & {(t.id, s) for t in tasks for s in range(config.samples)}), progress)
    ran, interrupted = 0, False
    executor = cf.ThreadPoolExecutor(max_workers=max(1, config.concurrency), thread_name_prefix="bench-episode")
    try:
        futures = {
            executor.submit(run_episode, task, policy, pool, config.episode, sample, config.eval): (task.id, sample)
            for task, sample in todo
        }
        correct = 0
        for future in cf.as_completed(futures):
            trajectory = future.result()
            store.append(trajectory)
            ran += 1
            correct += trajectory.best_turn is not None
            bar.update(1)
            bar.set_postfix(correct=f"{correct}/{ran}")
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: finished episodes are saved; run the same command again to resume", file=sys.stderr)
    finally:
        executor.shutdown(wait=not interrupted, cancel_futures=True)
        bar.close()
        if own_pool:
            pool.close()
    wanted = {(t.id, s) for t in tasks for s in range(config.samples)}
    trajectories = [t for t in store.load() if (t.task_id, t.sample) in wanted]
    return BenchRun(store.dir, trajectories, ran=ran, skipped=len(wanted) - len(todo), interrupted=interrupted)


def _progress_bar(total: int, already: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=f"episodes (resumed: {already} done)" if already else "episodes",
                unit="ep", disable=not enabled, dynamic_ncols=True, file=sys.stderr)

