"""One validated config per run: `TrainConfig`, loaded by `kernelrl.config_system.load` (preset or YAML file, then
dotted `key=value` overrides, one validation naming every bad field), printed at start and saved as
``config.yaml`` in the run directory. Its `eval` section is the gym's `EvalConfig` itself (plus the
trainer's pool settings), so every gym knob is settable and checked the gym's way."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from kernelrl import config_system as _config
from kernelrl.backend_names import BACKEND_NAMES
from kernelrl.config_system import ConfigError, ConfigModel
from kernelrl.evaluate.config import EvalConfig
from kernelrl.rewards.kernel import DEFAULT_REWARD, REWARDS

PRESET_DIR = Path(__file__).parent / "presets"


_Section = ConfigModel


def _known(registry: Any, kind: str, name: str) -> str:
    if name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(registry)}")
    return name


#: RL config fields naming a `kernelrl.rl` registry entry: field -> (registry, what it holds)
_RL_REGISTRIES = {"algo": ("ADVANTAGE_ESTIMATORS", "advantage estimator"),
                  "loss_agg": ("LOSS_AGGREGATIONS", "loss aggregation"), "kl_kind": ("KL_PENALTIES", "KL penalty")}


def _known_rl(field: str, name: str) -> str:
    """`name` if the `kernelrl.rl` registry of `field` holds it (imported only once a config names one: torch)."""
    import kernelrl.rl

    registry, kind = _RL_REGISTRIES[field]
    return _known(getattr(kernelrl.rl, registry), kind, name)


def _estimator_inputs(algo: str) -> Any:
    """What the advantage estimator `algo` declared it needs (`kernelrl.rl.registries.EstimatorInputs`; imports torch)."""
    import kernelrl.rl
    from kernelrl.rl.registries import estimator_inputs

    return estimator_inputs(_known(kernelrl.rl.ADVANTAGE_ESTIMATORS, "advantage estimator", algo))


class ModelConfig(_Section):
    """`tiny` builds a tokenizer and a randomly initialised Llama locally; otherwise a HF name/path."""

    name: str = "tiny"
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    vocab_size: int = Field(400, ge=260)
    max_positions: int = Field(256, ge=16)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    # `kernelrl train`: start the policy from these safetensors weights (same architecture), before SFT
    init_from: str | None = None


class TaskConfig(_Section):
    """The task family (`kernelrl.train.task_family`) and its train / held-out split.

    ``tiny-elementwise``: synthetic op chains (`min_ops`..`max_ops`, `rows` x `cols`). ``tiny-nki``: the same
    kind of chains, optionally ended by a row reduction, as NKI kernels (`kernelrl.train.nki_family`). ``suite``: real
    KernelBench-format tasks from `suite` (a shipped name such as ``level1`` or a path to a KernelBench
    directory / JSONL / Parquet dataset), evaluated on `backend`; `n_train` caps the train tasks."""

    family: Literal["tiny-elementwise", "tiny-nki", "suite"] = "tiny-elementwise"
    n_train: int = Field(256, ge=1)
    n_heldout: int = Field(16, ge=1)
    min_ops: int = Field(2, ge=1)
    max_ops: int = Field(4, ge=1)
    rows: int = Field(512, ge=1)
    cols: int = Field(1024, ge=1)
    suite: str = "level1"
    backend: Literal[BACKEND_NAMES] = "cpu"
    task_ids: list[str] = Field(default_factory=list)  # keep only these task ids (empty: all)
    tags: list[str] = Field(default_factory=list)  # keep tasks with any of these tags (empty: all)
    profile: str | None = None  # a size profile from the tasks' metadata, e.g. "gpu"
    scale: float | None = Field(None, gt=0)  # multiply the tasks' size constants (e.g. 0.1 for a small CPU)
    max_bytes: int | None = Field(None, ge=1)  # shrink sizes until inputs + weights + output fit
    prompt_rules: bool = True  # include the gym's rules and the backend help in the prompt
    feedback_mode: Literal["text", "json"] = "text"  # multi-turn feedback format
    feedback_tokens: int = Field(512, ge=16)  # multi-turn feedback budget (policy tokens)
    # tiny family, hybrid mode (KernelGYM's default): answers may leave ops to PyTorch, the gym runs with
    # torch_ops="allow" and records the time-based coverage; lazy_fraction of the SFT answers are lazy
    hybrid: bool = False
    lazy_fraction: float = Field(0.3, ge=0, le=1)
    # tiny family: share of SFT answers that first compile their draft with a plain-text tool call
    # (`kernelrl.agent.episode_protocol`), so a policy calls tools from the start of RL with `rl.tools`
    tool_fraction: float = Field(0.0, ge=0, le=1)


class SFTConfig(_Section):
    steps: int = Field(60, ge=0)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(3e-3, gt=0)
    # share of the train items that also get a feedback-then-fix pair (a wrong first draft, the gym's verdict of
    # it, the fix), so that later turns of an episode have something to go on (`task_family.warmup_pairs`)
    fix_fraction: float = Field(0.0, ge=0, le=1)
    # share of the train items that also get a feedback-then-faster pair (a correct first draft, lazy in hybrid
    # mode, the gym's verdict of it, an all-C answer), so a `faster:` cue is not new to the policy in RL
    faster_fraction: float = Field(0.0, ge=0, le=1)
    rft_rounds: int = Field(0, ge=0)  # rejection fine-tuning rounds after SFT (train on passing samples)
    rft_steps: int = Field(20, ge=0)


class RLConfig(_Section):
    # a `kernelrl.rl.ADVANTAGE_ESTIMATORS` name (checked against the registry). The trainer feeds outcome
    # rewards (+ TRLOO's turns, PRIME's process rewards, gae: its critic's values, `train.critic`);
    # estimators needing more (opd: token rewards) are accepted here but fail at the first update
    algo: str = "grpo"
    rollout: Literal["sync", "copris"] = "sync"
    steps: int = Field(30, ge=0)
    prompts_per_step: int = Field(8, ge=1)
    group_size: int = Field(4, ge=1)
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, gt=0)
    concurrency: int = Field(16, ge=1)  # samples in flight (CoPRIS)
    turns: int = Field(1, ge=1)  # >1: multi-turn, gym feedback as the next user turn
    # multi-turn: end an episode at its first correct turn (True), or run every episode to `turns` so
    # correct kernels keep being refined for speed (False: KernelGYM / Dr. Kernel)
    stop_at_first_correct: bool = True
    # agentic RL: a response may end in a plain-text tool call (``<tool>compile</tool>``, verify, profile);
    # the rollout runs it through the gym and appends its output (masked out of the loss), and the policy
    # continues the same turn; at most `max_tool_calls` per turn
    tools: bool = False
    max_tool_calls: int = Field(2, ge=1)
    # PRIME's accuracy filter: drop prompts whose group accuracy (share of episodes solved) is outside
    # [low, high]; None: off
    accuracy_filter: tuple[float, float] | None = None
    gamma: float = Field(1.0, ge=0, le=1)
    reward: str = DEFAULT_REWARD  # a `kernelrl.rewards.REWARDS` name; the same default as bench and the bridges
    reward_options: dict[str, Any] = Field(default_factory=dict)
    prs: Literal["off", "per_turn", "geometric"] = "off"
    dynamic_sampling: bool = True
    lr: float = Field(1e-3, gt=0)
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    micro_batch_size: int = Field(16, ge=1)
    ppo_epochs: int = Field(1, ge=1)
    clip_low: float = Field(0.2, gt=0)
    clip_high: float = Field(0.28, gt=0)
    loss_agg: str = "token-mean"
    kl_coef: float = Field(0.0, ge=0)
    kl_kind: str = "k3"
    entropy_coef: float = Field(0.0, ge=0)
    # rollout/trainer mismatch correction(s) (kernelrl.rl.MISMATCH_CORRECTIONS): one name (token_tis, seq_mis,
    # geo_rs, ...) with its options in mismatch_options, or a list applied together (masks AND, weights
    # multiply), e.g. [geo_rs, token_veto]; list entries are names (options: mismatch_options[name]) or
    # {name: geo_rs, lower: 0.999}. See `mismatch_specs`.
    mismatch: str | list[str | dict[str, Any]] | None = None
    mismatch_options: dict[str, Any] = Field(default_factory=dict)
    dual_clip: float | None = Field(None, gt=1)  # dual-clip PPO constant c (Ye et al. 2020); None: off
    prime_beta: float = Field(0.05, gt=0)
    prime_lr: float = Field(1e-3, gt=0)
    # algo=gae (PPO with a learned critic, `kernelrl.train.critic`): the critic's own AdamW lr, GAE's lambda
    # (gamma is `gamma`) and the value clip range of `clipped_value_loss`
    critic_lr: float = Field(1e-3, gt=0)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    value_clip: float = Field(0.2, gt=0)

    @field_validator("algo", "loss_agg", "kl_kind")
    @classmethod
    def _known_rl_name(cls, name: str, info: ValidationInfo) -> str:
        return _known_rl(info.field_name or "", name)

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, name: str) -> str:
        return _known(REWARDS, "reward", name)

    @model_validator(mode="after")
    def _mismatch_well_formed(self) -> RLConfig:
        from kernelrl.rl import MISMATCH_CORRECTIONS

        try:
            specs = self.mismatch_specs()
        except ValueError as exc:
            raise ValueError(f"mismatch: {exc}") from None
        for name, _ in specs:
            if name not in MISMATCH_CORRECTIONS:
                raise ValueError(f"mismatch: unknown mismatch correction {name!r}; known: {', '.join(MISMATCH_CORRECTIONS)}")
        if self.accuracy_filter is not None:
            low, high = self.accuracy_filter
            if not 0.0 <= low <= high <= 1.0:
                raise ValueError(f"accuracy_filter: needs 0 <= low <= high <= 1, got {self.accuracy_filter}")
        self._reward_options_fit()
        return self

    def _reward_options_fit(self) -> None:
        """`reward_options` must be keyword arguments the `reward` function takes."""
        import inspect

        params = inspect.signature(REWARDS.get(self.reward)).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        unknown = sorted(set(self.reward_options) - set(list(params)[1:]))
        if unknown:
            raise ValueError(f"reward_options: reward {self.reward!r} takes no option(s) {unknown}; "
                             f"it takes: {', '.join(list(params)[1:]) or 'none'}")

    def mismatch_specs(self) -> list[tuple[str, dict[str, Any]]]:
        """The mismatch corrections to apply, as ``(name, options)`` pairs (for
        `kernelrl.rl.apply_corrections`); empty when off.

        One name: its options are `mismatch_options` itself (the single-correction form). A list:
        each entry is a name, whose options are ``mismatch_options[name]`` (a mapping, optional), or a
        mapping ``{"name": ..., **options}``; with a list every key of `mismatch_options` must name a
        listed correction. Raises ValueError on a malformed spec.
        """
        if not self.mismatch:  # off (mismatch_options are ignored, so `rl.mismatch=null` turns a preset's off)
            return []
        if isinstance(self.mismatch, str):
            return [(self.mismatch, dict(self.mismatch_options))]
        specs: list[tuple[str, dict[str, Any]]] = []
        for entry in self.mismatch:
            if isinstance(entry, str):
                opts = self.mismatch_options.get(entry, {})
                if not isinstance(opts, dict):
                    raise ValueError(f"rl.mismatch_options[{entry!r}] must be a mapping of options for a list "
                                     f"rl.mismatch; got {opts!r}")
                specs.append((entry, dict(opts)))
            else:
                opts = dict(entry)
                name = opts.pop("name", None)
                if not isinstance(name, str):
                    raise ValueError(f"a rl.mismatch entry needs a 'name'; got {entry!r}")
                specs.append((name, opts))
        stray = set(self.mismatch_options) - {name for name, _ in specs}
        if stray:
            raise ValueError(f"rl.mismatch_options {sorted(stray)} name no listed correction; with a list "
                             "rl.mismatch, options are keyed by correction name")
        return specs


#: the trainer's own settings in the `eval` section (its pool's), not passed on to the gym
POOL_FIELDS = ("workers", "sandbox", "heldout_samples")


class TrainEvalConfig(EvalConfig):
    """The gym's `EvalConfig` (every field; train's own, cheaper defaults for the timing ones) plus the
    trainer's pool settings (`POOL_FIELDS`). `compile_baseline`: the speedup_vs_compile reward needs it;
    `measure_timing=false`: correctness only (speedups and fast_1 read 0; for a correctness reward)."""

    workers: int = Field(2, ge=1)
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    heldout_samples: int = Field(1, ge=1)  # greedy when 1
    correctness_trials: int = Field(2, ge=1)
    warmup: int = Field(1, ge=0)
    timing_trials: int = Field(5, ge=1)
    timing_budget_s: float = Field(0.3, gt=0)

    def gym_config(self, hybrid: bool = False) -> EvalConfig:
        """The pool's `EvalConfig`: this section less `POOL_FIELDS`; `hybrid` tasks allow torch ops."""
        data = self.model_dump(exclude=set(POOL_FIELDS))
        return EvalConfig.model_validate({**data, "torch_ops": "allow"} if hybrid else data)




class DistillConfig(_Section):
    """Direct-OPD (`kernelrl.train.distill`): teacher pair from `teacher_run` (its ``sft_policy`` and final
    ``policy``); when it has none, a short RL run (`teacher_rl_steps`) makes one. The student starts as a
    copy of the teacher's SFT policy (``teacher_ref``), as a larger model of the same family trained by its
    own SFT (``wide``: `student_hidden_size`, `student_num_layers`, `student_sft_steps`, `student_sft_lr`),
    or, with `student_from`, from an earlier run's weights (a distill run's student or a train run's final
    policy: shifts composed sequentially)."""

    teacher_run: str | None = None
    teacher_rl_steps: int = Field(15, ge=1)
    student: Literal["teacher_ref", "wide"] = "teacher_ref"  # start from the teacher's SFT policy, or a new larger model
    student_hidden_size: int = Field(192, ge=8)  # for student=wide
    student_num_layers: int | None = Field(None, ge=1)  # for student=wide; None: the teacher's
    student_sft_steps: int = Field(150, ge=0)
    student_sft_lr: float | None = Field(None, gt=0)  # None: sft.lr
    student_from: str | None = None  # an earlier run directory whose student (or final policy) starts this one
    # direct_opd: reward log pi_T - log pi_Tref (the pair's shift); reverse_kl: log pi_T - log pi (distil the
    # teacher's final policy itself, standard on-policy distillation; teacher_ref and kl_coef unused)
    objective: Literal["direct_opd", "reverse_kl"] = "direct_opd"
    # sampled: the reward of the sampled token; topk: every one of the student's top-K tokens per position
    # is an action with its own reward, weighted by `topk_weighting` (`kernelrl.rl.opd_topk_rewards`)
    token_reward: Literal["sampled", "topk"] = "sampled"
    topk: int = Field(8, ge=1)
    topk_weighting: Literal["student", "teacher", "unweighted"] = "student"
    steps: int = Field(60, ge=1)
    prompts_per_step: int = Field(8, ge=1)
    samples_per_prompt: int = Field(4, ge=1)
    lr: float = Field(3e-4, gt=0)
    token_coef: float = Field(1.0, gt=0)  # lambda: weight of the teacher log-ratio reward
    center: bool = True  # subtract the batch-mean token reward (a constant baseline: unbiased, less variance)
    # beta: KL to the student's start pi_0. In the token reward (kl_mode=reward) the optimum is
    # pi ~ pi_0 (T/Tref)^(lambda/beta): with student=teacher_ref, lambda = beta recovers the teacher and
    # lambda > beta extrapolates past it (G-OPD's ExOPD). kl_mode=k3_loss: the earlier k3 KL loss term.
    kl_coef: float = Field(1.0, ge=0)
    kl_mode: Literal["reward", "k3_loss"] = "reward"
    adaptive: bool = False  # Direct-OPD's controller: raise the KL coefficient while the mean reward is positive

    @model_validator(mode="after")
    def _consistent(self) -> DistillConfig:
        if self.token_reward == "topk" and self.kl_mode == "k3_loss":
            raise ValueError("token_reward: topk needs distill.kl_mode=reward (the KL to pi_0 enters each "
                             "candidate's reward); k3_loss is a sampled-token loss")
        return self


#: stages of a staged run (`kernelrl.train.stages`), in the order CUDA Agent uses them
STAGE_NAMES = ("sft", "warmup_rl", "rft", "critic", "ppo")


class WarmupStage(_Section):
    """Single-turn RL warm-up: `steps` updates with `algo`; every other RL setting from the `rl` section."""

    steps: int = Field(20, ge=0)
    algo: str = "grpo"

    @field_validator("algo")
    @classmethod
    def _known_algo(cls, name: str) -> str:
        return _known_rl("algo", name)


class RFTStage(_Section):
    """Rejection fine-tuning on agent trajectories: `episodes` multi-turn episodes (up to `turns` turns,
    T = 1) on each of `prompts` train items; the episodes whose last turn the gym passed are kept and their
    turns (`train_turns`: all of them, or only the final, passing one) are the SFT data, trained on for
    `epochs` passes (steps = ceil(epochs * pairs / batch_size): a fixed step count over few kept pairs
    overfits them; a first run with 30 steps over 23 pairs dropped held-out pass rate 0.34 -> 0.19)."""

    prompts: int = Field(32, ge=1)
    episodes: int = Field(4, ge=1)
    turns: int = Field(2, ge=1)
    train_turns: Literal["all", "final"] = "all"
    epochs: float = Field(2.0, ge=0)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(5e-4, gt=0)


class CriticStage(_Section):
    """Critic pretraining with the actor frozen: `steps` rollout batches of the `rl` section's shape, each
    fitting the critic to its GAE returns with `epochs` optimizer steps."""

    steps: int = Field(8, ge=0)
    epochs: int = Field(2, ge=1)


class PipelineConfig(_Section):
    """A staged run (`kernelrl.train.stages`, CUDA Agent's recipe): `stages` names them in order, from
    `STAGE_NAMES`; empty (the default) is the plain job (SFT, then RL with the `rl` section). ``sft`` uses
    the `sft` section, ``ppo`` the `rl` section (with ``rl.algo=gae`` its critic)."""

    stages: list[str] = Field(default_factory=list)
    warmup_rl: WarmupStage = Field(default_factory=WarmupStage)
    rft: RFTStage = Field(default_factory=RFTStage)
    critic: CriticStage = Field(default_factory=CriticStage)

    @field_validator("stages")
    @classmethod
    def _known_stages(cls, stages: list[str]) -> list[str]:
        unknown = [s for s in stages if s not in STAGE_NAMES]
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; known: {', '.join(STAGE_NAMES)}")
        dup = sorted({s for s in stages if stages.count(s) > 1})
        if dup:
            raise ValueError(f"{dup} listed more than once")
        if "critic" in stages and "ppo" in stages and stages.index("critic") > stages.index("ppo"):
            raise ValueError("'critic' (pretraining) must come before 'ppo'")
        return stages


class TrainConfig(_Section):
    name: str = "tiny-cpu"
    seed: int = 0
    out_dir: str = "runs/train"
    threads: int = Field(2, ge=1)
    log_every: int = Field(1, ge=1)
    checkpoint_every: int = Field(10, ge=0)  # 0: only at the end
    tensorboard: bool = True
    progress: bool = True
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    rl: RLConfig = Field(default_factory=RLConfig)
    eval: TrainEvalConfig = Field(default_factory=TrainEvalConfig)
    distill: DistillConfig = Field(default_factory=DistillConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if "critic" in self.pipeline.stages and not _estimator_inputs(self.rl.algo).values:
            raise ValueError(f"pipeline.stages: has 'critic' but rl.algo is {self.rl.algo!r}: a critic exists only "
                             "with rl.algo=gae")
        if self.task.min_ops > self.task.max_ops:
            raise ValueError("task.min_ops: must be <= task.max_ops")
        if self.rl.turns < 1 and _estimator_inputs(self.rl.algo).episodes:
            raise ValueError(f"rl.turns: {self.rl.algo} needs rl.turns >= 1")
        if self.rl.rollout == "copris" and self.rl.concurrency < self.rl.group_size:
            raise ValueError("rl.concurrency: must be >= rl.group_size for copris")
        if not self.eval.measure_timing and self.rl.reward not in ("binary", "correct", "compile", "compiled"):
            raise ValueError(f"rl.reward: eval.measure_timing=false leaves no speedup for rl.reward={self.rl.reward!r}; "
                             "use rl.reward=binary (or compile)")
        if self.distill.token_reward == "topk" and self.distill.topk > self.model.vocab_size:
            raise ValueError(f"distill.topk: ({self.distill.topk}) must be <= model.vocab_size ({self.model.vocab_size})")
        return self

    def save(self, run_dir: str | Path) -> Path:
        path = Path(run_dir) / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_yaml())
        return path


def preset_names() -> list[str]:
    return _config.preset_names(PRESET_DIR)


parse_overrides = _config.parse_overrides


def load_config(preset: str | None = "tiny-cpu", path: str | Path | None = None,
                overrides: list[str] | None = None) -> TrainConfig:
    """Config from a preset name (``presets/<name>.yaml``; None: the defaults alone), then the YAML/JSON file
    at `path` laid over it, then `overrides`; a `ConfigError` naming every bad field otherwise."""
    return _config.load(TrainConfig, preset, path, overrides, PRESET_DIR, "train config")


__all__ = ["ConfigError", "TrainConfig", "TrainEvalConfig", "load_config", "parse_overrides", "preset_names"]
