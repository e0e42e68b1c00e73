"""RL and SFT trainers for kernel-writing models: configs and presets, rollouts against the gym,
checkpoints, logging and reports. The math lives in `kernelrl.rl`; rewards in `kernelrl.rewards`."""

from kernelrl.train.config import TrainConfig, load_config, parse_overrides, preset_names

__all__ = ["TrainConfig", "load_config", "parse_overrides", "preset_names"]
