"""Where the gym's workers spend the main job's RL phase: every worker-second, reference timings and idle time
included, as shares of the workers' capacity.

Runs `kernelrl train --preset tiny-cpu` (overrides as `KEY=VALUE`) in this process, with an empty build cache of
its own, and times each request a pool worker sends its supervisor (`pool.Worker.run`) from the pool's side: an
evaluation (``result``) or a reference timing (``reference``: the pool times each task's reference once, in a
child that runs no candidate code, prefetched when a group's prompt is handed out, and the next step's ahead, at a
lower priority). Over the RL phase (from the start of RL to the start of the held-out evaluation after it) the
workers' capacity (workers x wall) splits into:

- evaluations, and within them the stages of the cost breakdown (`evaluate.costs`) summed over the phase's
  evaluations: static, build, init, correctness, timing (timed calls apart), fork and teardown;
- reference timings: how many, their p50, their sum (a prefetched reference is no evaluation's: the cost
  breakdown has them only as a row of their own, `reference_timings`, from the pool's `reference_log`);
- idle: no request in flight (the trainer generating or updating, or a worker waiting for the next job).

The per-step medians of generation and evaluate-wait come from the same run, and over the whole run how many tasks
got an evaluation and how many of them a timed one (a reference timed only for those would skip the rest). This
says which lever is worth what before anyone builds it.

The CPU of the phase's judges and candidates is summed apart (`evaluate.costs`: judge_cpu, candidate_cpu).

Last, the floor that the builds alone put under target 2 of the gym-throughput issue (evaluate-wait <= 2x generate):
after the run, on the then idle machine, the CPU of one build as the gym runs it (the tiny family's include block
precompiled, the lean link; user + system of every process it starts, `bench_build_cost.linker_ab`'s default arm alone), times
the RL phase's builds per step (evaluations whose build stage took longer than a cache hit can), over the cores.

    python bench/bench_gym_budget.py [--no-write] [--floor-repeats 10] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_build_cost import cold_cache, linker_ab

NEW_BUILD_S = 0.025  # a build stage longer than this compiled (a cache hit takes ~9 ms: bench_build_cost's gym_build_cached)

#: cost-breakdown parts, as budget rows (a part inside another is named under it)
PARTS = {"static": "static", "build": "build", "init": "init", "correctness": "correctness", "timing": "timing",
         "timed_calls": "timing.timed_calls", "profile_settling": "timing.profile_settling",
         "fork_teardown": "fork_teardown", "spawn": "fork_teardown.spawn", "teardown": "fork_teardown.teardown"}


def run(overrides: list[str]) -> dict[str, Any]:
    from kernelrl.evaluate import EvalPool
    from kernelrl.evaluate import pool as pool_module
    from kernelrl.train import job as job_module
    from kernelrl.train.config import load_config
    from kernelrl.train.job import eval_config, run_train

    requests: list[tuple[str, float, float]] = []  # (event, start, end) of every supervisor request
    judged: list[tuple[str, bool]] = []  # (task id, reached the timing stage) of every evaluation's reply
    lock = threading.Lock()
    original_run = pool_module.Worker.run

    def timed_run(self: Any, job: Any, deadline: float, event: str = "result") -> Any:
        start = time.perf_counter()
        reply = None
        try:
            reply = original_run(self, job, deadline, event)
            return reply
        finally:
            with lock:
                requests.append((event, start, time.perf_counter()))
                if event == "result" and isinstance(reply, dict):
                    judged.append((job.task.id, reply.get("timing") is not None))

    stages: dict[str, tuple[float, int]] = {}
    original_stage_start = job_module.stage_start
    cfg = load_config("tiny-cpu", overrides=overrides)
    with cold_cache(), tempfile.TemporaryDirectory() as tmp, \
            EvalPool(cfg.eval.workers, eval_config(cfg), sandbox=cfg.eval.sandbox) as pool:

        def marked_stage_start(name: str, *args: Any, **kwargs: Any) -> Any:
            stages[name] = (time.perf_counter(), len(pool.cost_log))
            return original_stage_start(name, *args, **kwargs)

        pool_module.Worker.run = timed_run  # type: ignore[method-assign]
        job_module.stage_start = marked_stage_start
        try:
            summary = run_train(cfg, run_dir=Path(tmp) / "run", echo=False, report=False, pool=pool)
        finally:
            pool_module.Worker.run = original_run  # type: ignore[method-assign]
            job_module.stage_start = original_stage_start
        (start, first), (end, last) = stages["rl"], stages["heldout_rl"]
        rows = pool.cost_log[first:last]
    capacity = cfg.eval.workers * (end - start)

    def in_phase(event: str) -> list[float]:
        return [min(b, end) - max(a, start) for e, a, b in requests if e == event and b > start and a < end]

    evaluations, references = in_phase("result"), in_phase("reference")
    builds = sum(1 for row in rows if row.get("build", 0.0) > NEW_BUILD_S)
    budget = {
        "evaluations": sum(evaluations),
        **{f"evaluations.{row_name}": sum(row.get(part, 0.0) for row in rows) for part, row_name in PARTS.items()},
        "reference_timings": sum(references),
        "idle": capacity - sum(evaluations) - sum(references),
    }
    return {
        "rl_steps": cfg.rl.steps, "workers": cfg.eval.workers, "rl_wall_s": end - start, "capacity_worker_s": capacity,
        "worker_s": budget, "share_of_capacity": {k: v / capacity for k, v in budget.items()},
        "evaluations": len(evaluations), "reference_timings": len(references),
        "tasks_judged": len({task for task, _ in judged}), "tasks_timed": len({task for task, timed in judged if timed}),
        "reference_timing_p50_ms": 1000 * statistics.median(references) if references else None,
        "evaluation_p50_ms": 1000 * statistics.median(evaluations) if evaluations else None,
        "rl_step_times": summary.get("rl_step_times", {}), "builds": builds,
        "cpu_s": {"judges": sum(row.get("judge_cpu", 0.0) for row in rows),
                  "candidates": sum(row.get("candidate_cpu", 0.0) for row in rows)},
        "after_rl": {k: v for k, v in summary["after_rl"].items() if k != "examples"},
        "overrides": overrides,
    }


def build_floor(record: dict[str, Any], repeats: int = 10) -> dict[str, float]:
    """The least wall time per RL step that the phase's builds need on this machine's cores, beside target 2's
    budget (twice the median generate time): builds per step x one build's CPU (median of `repeats`, idle) / cores."""
    cpu_ms = linker_ab(repeats, only=("default_linker",))["ab_cpu_default_linker"]
    cores = os.cpu_count() or 1
    per_step = record["builds"] / max(1, record["rl_steps"])
    cpu_s = per_step * cpu_ms / 1000
    return {"build_cpu_ms": cpu_ms, "builds_per_step": per_step, "build_cpu_per_step_s": cpu_s, "cores": cores,
            "build_wall_floor_s": cpu_s / cores,
            "evaluate_wait_budget_s": 2 * record["rl_step_times"].get("time/generate", 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_gym_budget.json")
    parser.add_argument("--floor-repeats", type=int, default=10, help="builds per arm timed for the build floor")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the tiny-cpu preset")
    args = parser.parse_args()
    record = run(args.overrides)
    record["build_floor"] = build_floor(record, args.floor_repeats)
    steps = record["rl_step_times"]
    print(f"tiny-cpu RL phase: {record['rl_steps']} steps in {record['rl_wall_s']:.1f} s on {record['workers']} workers "
          f"({record['capacity_worker_s']:.1f} worker-s); per step p50 generate {steps.get('time/generate', 0):.2f} s, "
          f"evaluate-wait {steps.get('time/evaluate_wait', 0):.2f} s")
    print(f"{record['evaluations']} evaluations (p50 {record['evaluation_p50_ms'] or 0:.0f} ms), "
          f"{record['reference_timings']} reference timings (p50 {record['reference_timing_p50_ms'] or 0:.0f} ms); over the "
          f"whole run {record['tasks_judged']} tasks got an evaluation, {record['tasks_timed']} of them a timed one")
    print("| worker time | s | share of capacity |\n|---|---|---|")
    for name, seconds in record["worker_s"].items():
        print(f"| {name} | {seconds:.1f} | {100 * record['share_of_capacity'][name]:.1f}% |")
    cpu = record["cpu_s"]
    print(f"CPU over the RL phase's evaluations: judges {cpu['judges']:.1f} s, candidates {cpu['candidates']:.1f} s "
          f"(of {record['capacity_worker_s']:.1f} worker-s)")
    floor = record["build_floor"]
    print(f"target 2 floor: {floor['builds_per_step']:.1f} builds per step x {floor['build_cpu_ms']:.0f} ms CPU each "
          f"= {floor['build_cpu_per_step_s']:.2f} s of CPU, >= {floor['build_wall_floor_s']:.2f} s on {floor['cores']} cores, "
          f"against an evaluate-wait budget of {floor['evaluate_wait_budget_s']:.2f} s (2x generate): "
          f"{'within' if floor['build_wall_floor_s'] <= floor['evaluate_wait_budget_s'] else 'ABOVE'} it")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_gym_budget", record))


if __name__ == "__main__":
    main()
