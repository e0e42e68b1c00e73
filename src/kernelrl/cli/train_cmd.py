"""`kernelrl train`: SFT warm-up then RL against the real CPU gym, with a held-out evaluation and report.

`kernelrl train --preset tiny-cpu` runs the main job on a fresh machine (no download). The config resolves
as defaults < `--preset` (default tiny-cpu) < `--config FILE` (a partial YAML/JSON file: only the keys it
sets) < `--set key=value` or trailing `key=value` pairs and the flags (dotted paths). A config that does not validate stops the command before any work, naming each bad field.
`kernelrl train --preset cuda-agent-tiny` runs CUDA Agent's stages (`pipeline.stages`: SFT, single-turn RL
warm-up, RFT on multi-turn agent trajectories, critic pretraining, PPO with the critic).
"""

from __future__ import annotations

import argparse

from kernelrl.cli.config_args import add_config_arguments, resolve_config, train_presets


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="SFT + RL training against the gym (main job: --preset tiny-cpu)",
                       description=__doc__)
    add_config_arguments(p, "YAML/JSON file laid over the preset (only the keys it sets)", train_presets(), "tiny-cpu")
    p.add_argument("--algo", help="advantage estimator, a kernelrl.rl.ADVANTAGE_ESTIMATORS name (grpo, rloo, trloo, "
                                  "prime, ...; the config rejects unknown names)")
    p.add_argument("--rollout", choices=["sync", "copris"])
    p.add_argument("--out", help="run directory (default: the config's out_dir)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in the run directory")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. rl.steps=10")
    p.set_defaults(handler=run)


def resolve(args: argparse.Namespace) -> object:
    from kernelrl.train.config import load_config

    overrides = list(getattr(args, "set", []) or []) + list(args.overrides)
    if args.algo:
        overrides.append(f"rl.algo={args.algo}")
        if args.algo == "trloo" and not _file_sets(args.config, "rl", "turns"):
            overrides.insert(0, "rl.turns=2")  # TRLOO is the multi-turn estimator; the file or an override wins
    if args.rollout:
        overrides.append(f"rl.rollout={args.rollout}")
    if args.out:
        overrides.append(f"out_dir={args.out}")
    return load_config(args.preset, args.config, overrides)


def _file_sets(path: str | None, section: str, key: str) -> bool:
    """The ``--config`` file at `path` sets `section.key`."""
    from kernelrl.config_system import read_file

    if path is None:
        return False
    data = read_file(path).get(section)
    return isinstance(data, dict) and key in data


def run(args: argparse.Namespace) -> int:

    cfg, status = resolve_config("train", lambda: resolve(args), args.print_config)
    if status is not None:
        return status
    from kernelrl.train.job import run_train

    summary = run_train(cfg, resume=args.resume)  # type: ignore[arg-type]
    for name, d in summary.get("stages", {}).items():
        print(f"after {name}: held-out pass rate {d['heldout']['pass_rate']:.3f}, fast_1 {d['heldout']['fast_1']:.3f}")
    a, b = summary.get("after_sft", {}), summary.get("after_rl", {})
    print(f"held-out pass rate {a.get('pass_rate', 0):.3f} -> {b.get('pass_rate', 0):.3f}, "
          f"fast_1 {a.get('fast_1', 0):.3f} -> {b.get('fast_1', 0):.3f}; report: "
          f"{cfg.out_dir}/report.md")  # type: ignore[attr-defined]
    return 0
