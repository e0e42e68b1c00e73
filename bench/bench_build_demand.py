"""How many builds and verdicts the main job's RL run needs, and what a normalised cache key would save.

Runs `kernelrl train --preset tiny-cpu` in this process (overrides as `KEY=VALUE`) with an empty build cache
of its own and a verdict cache that records every answer it sends to the gym. Counts:

- answers judged: the distinct (task, source) pairs the verdict cache sent to the pool, and its hits;
- builds: the libraries the build service made (files in the run's own cache: distinct kernel sources that
  compiled), beside the judged answers by how far they got (a compile error is a compile too);
- what a key normalised for comments and runs of whitespace would have judged: distinct (task, normalised
  source) pairs. The difference is the evaluations such a key saves.

In the main job a new build is most of an evaluation (`main_job_tiny_cpu.json`), so this says whether more
cache hits could cut the gym's time per RL step, or whether the builds are distinct work.

    python bench/bench_build_demand.py [--no-write] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench_build_cost import cold_cache

_LINE_COMMENT = re.compile(r"//[^\n]*")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_SPACE = re.compile(r"\s+")


def normalised(source: str) -> str:
    """`source` less its `//` and `/* */` comments, with every run of whitespace one space: an upper bound on what
    a comment- and whitespace-blind key could merge (it ignores string literals, so it may merge a few that differ)."""
    return _SPACE.sub(" ", _BLOCK_COMMENT.sub("", _LINE_COMMENT.sub("", source))).strip()


def run(overrides: list[str]) -> dict[str, Any]:
    from kernelrl.evaluate import EvalPool
    from kernelrl.train.config import load_config
    from kernelrl.train.job import eval_config, run_train
    from kernelrl.train.rollout import EvalCache
    from kernelrl.train.task_family import make_family

    judged: list[tuple[str, str]] = []

    class RecordingCache(EvalCache):
        def judge(self, task: Any, candidate: Any) -> Any:
            if (task.id, candidate.source) not in self._futures:
                judged.append((task.id, candidate.source))
            return super().judge(task, candidate)

    cfg = load_config("tiny-cpu", overrides=overrides)
    with cold_cache() as cache_root, tempfile.TemporaryDirectory() as tmp, \
            EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox) as pool:
        cache = RecordingCache(pool, make_family(cfg.task, cfg.seed))
        summary = run_train(cfg, run_dir=Path(tmp) / "run", echo=False, cache=cache, report=False)
        statuses = Counter(str(future.result().status) for future in cache._futures.values())
        builds = sum(1 for p in (cache_root / "native").rglob("*.so") if p.is_file())
    distinct_normalised = len({(task, normalised(source)) for task, source in judged})
    return {
        "judged": len(judged), "verdict_cache_hits": cache.hits, "builds": builds, "judged_by_status": dict(statuses),
        "judged_with_normalised_key": distinct_normalised, "saved_by_normalised_key": len(judged) - distinct_normalised,
        "distinct_sources_all_tasks": len({source for _, source in judged}),
        "rl_steps": cfg.rl.steps, "after_rl": {k: v for k, v in summary["after_rl"].items() if k != "examples"},
        "overrides": overrides,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_build_demand.json")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the tiny-cpu preset")
    args = parser.parse_args()
    record = run(args.overrides)
    print(f"tiny-cpu, {record['rl_steps']} RL steps: {record['judged']} answers judged ({record['verdict_cache_hits']} verdict "
          f"cache hits; by status {record['judged_by_status']}), {record['builds']} libraries built; a comment- and whitespace-blind key would have judged "
          f"{record['judged_with_normalised_key']} (saving {record['saved_by_normalised_key']})")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_build_demand", record))


if __name__ == "__main__":
    main()
