"""`kernelrl repro cuda-agent`: CUDA Agent's staged recipe (Dai et al. 2026, arXiv 2602.24286) at CPU scale,
over several seeds, with the paper's ablation arm.

CUDA Agent trains in stages (single-turn RL warm-up, rejection fine-tuning on agent trajectories, critic
pretraining with the actor frozen, then agentic PPO) and reports that leaving out RFT and value pretraining
degrades agentic RL. Here, per seed, on the ``cuda-agent-tiny`` preset (`kernelrl.train.stages`):

- the full run: ``sft -> warmup_rl -> rft -> critic -> ppo``, each stage followed by a held-out evaluation;
- the ablation arm, branched from the same run's checkpoint after ``warmup_rl`` (same weights, optimizer and
  RNG states): ``ppo`` straight away, without RFT and without critic pretraining (its critic starts as a copy
  of the policy, untrained), for the same PPO steps.

Paired over seeds (`kernelrl.repro.stats`), on the held-out sampled pass rate (`METRIC`: correctness only, no
timing noise; `SPEED_METRIC` is reported beside it): RFT over the warm-up policy, PPO over RFT, the full
recipe over its ablation, and the whole recipe over SFT. Writes ``results.json`` (`kernelrl.repro.record`),
then ``report.md`` and ``cuda-agent.png`` rendered from it alone (`repro.cuda_agent_report`); each seed's runs
stay under ``seed<N>/`` (``full/``, ``no_rft_no_critic/``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelrl.evaluate import EvalPool
from kernelrl.repro.record import new_record, read_record, write_record
from kernelrl.repro.seeds import run_seeds
from kernelrl.repro.stats import paired
from kernelrl.train.config import TrainConfig, load_config
from kernelrl.train.stages import RESUME_FIELDS, run_stages

#: the ablation arm's stages: CUDA Agent's recipe less RFT and critic pretraining
ABLATION = ["sft", "warmup_rl", "ppo"]
#: the stage after which the ablation branches off the full run (its checkpoint is the common start)
BRANCH_AFTER = "warmup_rl"
#: the held-out number the comparisons are judged on, and the speed number reported beside it
METRIC, SPEED_METRIC = "sampled_pass_rate", "sampled_fast_1"
#: comparison -> (arm, stage) minus (arm, stage): positive means the claim holds
COMPARISONS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "rft_vs_warmup": (("full", "rft"), ("full", "warmup_rl")),
    "ppo_vs_rft": (("full", "ppo"), ("full", "rft")),
    "full_vs_ablation": (("full", "ppo"), ("ablation", "ppo")),
    "full_vs_sft": (("full", "ppo"), ("full", "sft")),
}
#: the preset at seconds size (tests, ``--smoke``)
SMOKE = [
    "model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.vocab_size=320",
    "model.max_positions=160", "task.n_train=8", "task.n_heldout=2", "task.min_ops=2", "task.max_ops=2",
    "task.rows=64", "task.cols=256", "sft.steps=10", "sft.batch_size=8", "pipeline.warmup_rl.steps=1",
    "pipeline.rft.prompts=2", "pipeline.rft.episodes=2", "pipeline.rft.batch_size=4", "pipeline.critic.steps=1",
    "pipeline.critic.epochs=1", "rl.steps=1", "rl.prompts_per_step=1", "rl.group_size=2", "rl.max_new_tokens=16",
    "rl.micro_batch_size=4", "eval.workers=1", "eval.correctness_trials=1", "eval.timing_trials=2",
    "eval.timing_budget_s=0.1", "eval.heldout_samples=2",
]
COMMON = ["name=repro-cuda-agent", "checkpoint_every=0", "tensorboard=false", "progress=false"]


def repro_config(smoke: bool = False, overrides: list[str] | None = None) -> TrainConfig:
    """The ``cuda-agent-tiny`` preset (at seconds size with `smoke`), then `overrides`; the full recipe."""
    cfg = load_config("cuda-agent-tiny", overrides=[*COMMON, *(SMOKE if smoke else []), *(overrides or [])])
    missing = [s for s in ("sft", BRANCH_AFTER, "rft", "critic", "ppo") if s not in cfg.pipeline.stages]
    if missing:
        raise ValueError(f"pipeline.stages: the repro compares the full recipe; it lacks {', '.join(missing)}")
    return cfg


def branch(full_run: Path, cfg: TrainConfig, arm_run: Path) -> None:
    """Start the run `arm_run` of `cfg` (another stage list) from `full_run`'s checkpoint after `BRANCH_AFTER`:
    the checkpoint is copied and stamped with `cfg`'s settings, so that resuming `arm_run` continues from it
    with `cfg`'s next stage. Both stage lists must agree up to that stage."""
    index = cfg.pipeline.stages.index(BRANCH_AFTER)
    source = full_run / "stages" / f"{index}_{BRANCH_AFTER}"
    if not (source / "state.json").is_file():
        raise FileNotFoundError(f"no checkpoint after {BRANCH_AFTER} in {full_run}")
    if (arm_run / "stages").exists():  # a previous run's later stages would be resumed instead
        shutil.rmtree(arm_run / "stages")
    target = arm_run / "stages" / source.name
    shutil.copytree(source, target)
    state = json.loads((target / "state.json").read_text())
    mine = cfg.model_dump()
    state["config"] = {k: mine[k] for k in RESUME_FIELDS}
    (target / "state.json").write_text(json.dumps(state))


def _numbers(summary: dict[str, Any]) -> dict[str, Any]:
    """Per stage: its held-out numbers (no examples) and its own scalar metrics."""
    out = {}
    for name, d in summary["stages"].items():
        held = {k: float(v) for k, v in d["heldout"].items() if isinstance(v, int | float)}
        out[name] = {"heldout": held, **{k: v for k, v in d.items() if k != "heldout" and isinstance(v, int | float | bool)}}
    return out


def run_seed(cfg: TrainConfig, out: Path, pool: EvalPool, say: Callable[[str], None]) -> dict[str, Any]:
    """One seed: the full recipe, then the ablation arm branched from its checkpoint after the warm-up."""
    say(f"full recipe {cfg.pipeline.stages}")
    full = run_stages(cfg, run_dir=out / "full", echo=False, pool=pool)
    ablation_cfg = cfg.model_copy(deep=True)
    ablation_cfg.pipeline.stages = list(ABLATION)
    branch(out / "full", ablation_cfg, out / "no_rft_no_critic")
    say(f"ablation {ABLATION} from the checkpoint after {BRANCH_AFTER}")
    ablation = run_stages(ablation_cfg, run_dir=out / "no_rft_no_critic", echo=False, pool=pool, resume=True)
    return {"full": _numbers(full), "ablation": _numbers(ablation),
            "times": {"full": full["times"], "ablation": ablation["times"]},
            "eval_cache": {"full": full["eval_cache"], "ablation": ablation["eval_cache"]}}


def comparisons(seeds: dict[str, Any]) -> dict[str, Any]:
    """Each comparison of `COMPARISONS` on `METRIC` and on `SPEED_METRIC`, paired over the seeds."""
    out: dict[str, Any] = {}
    for name, ((arm_a, stage_a), (arm_b, stage_b)) in COMPARISONS.items():
        for metric in (METRIC, SPEED_METRIC):
            diffs = [d[arm_a][stage_a]["heldout"][metric] - d[arm_b][stage_b]["heldout"][metric] for d in seeds.values()]
            out[name if metric == METRIC else f"{name}/{metric}"] = paired(diffs)
    return out


def run_cuda_agent(cfg: TrainConfig, out: str | Path, *, seeds: tuple[int, ...] = (0, 1, 2),
                   pool: EvalPool | None = None, echo: bool = True) -> dict[str, Any]:
    """Every seed, the paired comparisons; ``results.json``, then the report and plot rendered from it."""
    from kernelrl.repro.cuda_agent_report import rewrite_report

    if not seeds:
        raise ValueError("at least one seed is needed")
    t_start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {**new_record("cuda-agent", cfg.model_dump()), "seed_list": list(seeds),
                               "ablation_stages": ABLATION, "branch_after": BRANCH_AFTER, "metric": METRIC,
                               "speed_metric": SPEED_METRIC, "seeds": {}, "times": {}}
    run_seeds("cuda-agent", cfg, seeds, out, results, run_seed, pool=pool, echo=echo, started=t_start)
    results["comparisons"] = comparisons(results["seeds"])
    results["times"]["total_s"] = results["wall_s"] = time.perf_counter() - t_start
    write_record(out, results)
    rewrite_report(out)
    return read_record(out)
