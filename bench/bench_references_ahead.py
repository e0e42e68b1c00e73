"""The next RL step's references timed ahead, against the same code with that switched off, side by side.

Each RL step knows the next step's items (the prompt stream is seeded), and the rollout asks the gym to time their
references ahead (`EvalPool.prefetch(ahead=True)`) once the step's generation is done, at a priority below every
evaluation, so they run in the step's tail and update instead of in front of the next step's verdicts (asked for
at hand-out, as first built, they ran while the policy decoded and took its CPU: that version lost this A/B). The `off` arm runs the same code with the
stream's lookahead forced to 0 (only the references of the items being handed out are prefetched, as before the
change). Arms alternate (on/off, then off/on, ...) over `--rounds` rounds of the main job's RL phase
(`bench_gym_budget.run`: tiny-cpu, its own empty build cache), so a slow hour hits both.

Per arm: the median over rounds of the per-step median evaluate-wait and generate times, the RL phase's wall time,
the workers' idle share, and how many references were prefetched ahead (0 in the off arm, checked).

    python bench/bench_references_ahead.py [--rounds 2] [--no-write] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench_gym_budget import run

ARMS = ("on", "off")


def run_arm(arm: str, overrides: list[str]) -> dict[str, Any]:
    """One RL phase with references ahead `on` or `off`, and how many ahead prefetches the pool queued."""
    from kernelrl.evaluate import pool as pool_module
    from kernelrl.train import rollout as rollout_module

    queued_ahead = [0]
    original_prefetch, original_init = pool_module.EvalPool.prefetch, rollout_module.PromptStream.__init__

    def counting_prefetch(self: Any, *args: Any, ahead: bool = False, **kwargs: Any) -> Any:
        future = original_prefetch(self, *args, ahead=ahead, **kwargs)
        queued_ahead[0] += int(ahead and future is not None)
        return future

    def without_lookahead(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **{**kwargs, "lookahead": 0})

    pool_module.EvalPool.prefetch = counting_prefetch  # type: ignore[method-assign]
    if arm == "off":
        rollout_module.PromptStream.__init__ = without_lookahead  # type: ignore[method-assign]
    try:
        record = run(overrides)
    finally:
        pool_module.EvalPool.prefetch = original_prefetch  # type: ignore[method-assign]
        rollout_module.PromptStream.__init__ = original_init  # type: ignore[method-assign]
    steps = record["rl_step_times"]
    return {"arm": arm, "rl_wall_s": record["rl_wall_s"], "evaluate_wait_s": steps.get("time/evaluate_wait", 0.0),
            "generate_s": steps.get("time/generate", 0.0), "idle_share": record["share_of_capacity"]["idle"],
            "reference_timings": record["reference_timings"], "queued_ahead": queued_ahead[0],
            "after_rl": record["after_rl"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="RL phases per arm, alternating the order")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_references_ahead.json")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the tiny-cpu preset")
    args = parser.parse_args()
    runs = []
    for round_index in range(args.rounds):
        for arm in ARMS if round_index % 2 == 0 else ARMS[::-1]:
            runs.append(run_arm(arm, args.overrides))
            last = runs[-1]
            print(f"round {round_index} {arm}: RL {last['rl_wall_s']:.1f} s, evaluate-wait {last['evaluate_wait_s']:.3f} s, "
                  f"generate {last['generate_s']:.3f} s, idle {100 * last['idle_share']:.1f}%, "
                  f"{last['queued_ahead']} references queued ahead", flush=True)
    if any(r["queued_ahead"] for r in runs if r["arm"] == "off"):
        raise SystemExit("the off arm queued references ahead: the switch did not take")
    summary = {arm: {key: statistics.median(r[key] for r in runs if r["arm"] == arm)
                     for key in ("rl_wall_s", "evaluate_wait_s", "generate_s", "idle_share", "queued_ahead")}
               for arm in ARMS}
    on, off = summary["on"], summary["off"]
    ratios = {"evaluate_wait_on_over_off": on["evaluate_wait_s"] / max(off["evaluate_wait_s"], 1e-9),
              "rl_wall_on_over_off": on["rl_wall_s"] / max(off["rl_wall_s"], 1e-9)}
    for arm in ARMS:
        s = summary[arm]
        print(f"{arm:>3} (median of {args.rounds}): RL {s['rl_wall_s']:.1f} s, evaluate-wait {s['evaluate_wait_s']:.3f} s, "
              f"generate {s['generate_s']:.3f} s, idle {100 * s['idle_share']:.1f}%")
    print(f"on / off: evaluate-wait {ratios['evaluate_wait_on_over_off']:.2f}x, RL wall {ratios['rl_wall_on_over_off']:.2f}x")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_references_ahead", {"rounds": args.rounds, "overrides": args.overrides,
                                                                  "summary": summary, "ratios": ratios, "runs": runs}))


if __name__ == "__main__":
    main()
