"""Kernel rewards from an `EvalResult`: weighted, capped speedup + coverage,
milestones, and AutoTriton's rule-based reward combined with the execution reward.

Every function takes an `EvalResult` (a dict from the wire is decoded once where it enters, e.g. by the
service client) and returns a float; extra keyword options are plain numbers so a config can name a
reward and its options.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from kernelrl.evaluate.result import EvalResult, Status
from kernelrl.registry import Registry

RewardFn = Callable[..., float]
REWARDS: Registry[RewardFn] = Registry("reward")
# The one default: bench episodes (`kernelrl.agent.default_reward`), `kernelrl train` (``rl.reward``) and the
# verl / TRL bridges (`kernelrl.integrations.scoring.reward_from_result`) all score with this entry.
DEFAULT_REWARD = "speedup"
#: the least a correct kernel earns under the speedup-shaped rewards, however slow (a wrong one earns 0)
CORRECT_FLOOR = 0.1


def coverage(r: EvalResult) -> float:
    """Profiling coverage in [0, 1]: the share of the candidate's forward spent in its own kernels.

    Dr. Kernel (KernelGYM) measures it with a GPU profiler as kernel time / total device time. The gym's
    own measure is time-based too: ``EvalResult.coverage["fraction"]``, the share of compute time the
    judge's instruction-pointer samples put in the candidate's own code (vs libtorch, BLAS, numpy), taken
    from outside the candidate's process. Without it (a backend whose compute cannot be attributed, or no
    ptrace), an explicit ``environment["coverage"]`` wins; otherwise the call-count proxy
    ``kernel calls / (kernel calls + torch compute-op calls)`` over the correctness trials, from
    ``kernel_calls`` and ``torch_ops``. No kernel call at all gives 0.
    """
    if r.coverage and r.coverage.get("fraction") is not None:
        return float(min(1.0, max(0.0, r.coverage["fraction"])))
    explicit = r.environment.get("coverage") if r.environment else None
    if explicit is not None:
        return float(min(1.0, max(0.0, explicit)))
    kernel = sum(r.kernel_calls.values())
    torch_calls = sum(max(0, n) for n in r.torch_ops.values())  # the candidate's own counters: no negative credit
    if kernel <= 0:
        return 0.0
    return kernel / (kernel + torch_calls)


def _speedup(r: EvalResult) -> float | None:
    s = r.speedup
    return float(s) if s is not None and math.isfinite(s) and s > 0 else None


@REWARDS.register("binary", "correct")
def binary_reward(result: EvalResult) -> float:
    """1 when correct, else 0."""
    return 1.0 if result.correct else 0.0


def compiled(result: EvalResult) -> bool:
    """The candidate built and ran its kernels without a compile error: the build stage passed and the
    status is none of compile_error (for NKI an interpreter rule such as partition dim > 128, raised when
    the kernel is traced on its first call), rejected (the gym's veto) or crashed."""
    built = any(s.name == "build" and s.status == "ok" for s in result.stages)
    return built and result.status not in (Status.COMPILE_ERROR, Status.REJECTED, Status.CRASHED)


@REWARDS.register("compile", "compiled")
def compile_reward(result: EvalResult) -> float:
    """NKI-Agent's binary compile reward: 1 when the candidate compiled (see `compiled`; a wrong answer
    counts), else 0. NKI-Agent found GRPO with it no better than SFT, unlike an execution reward."""
    return 1.0 if compiled(result) else 0.0


@REWARDS.register("weighted")
def weighted_reward(
    result: EvalResult, *, correct_weight: float = 0.3, faster_weight: float = 0.7,
    threshold: float = 1.0,
) -> float:
    """Weighted reward ``w_c * 1[correct] + w_f * 1[correct and speedup > threshold]``
    (Kevin / KernelLLM style; defaults 0.3 and 0.7)."""
    if not result.correct:
        return 0.0
    s = _speedup(result)
    return correct_weight + (faster_weight if s is not None and s > threshold else 0.0)


@REWARDS.register("speedup")
def speedup_reward(
    result: EvalResult, *, correct_bonus: float = 1.0, cap: float = 3.0, log: bool = True,
    correct_floor: float = CORRECT_FLOOR,
) -> float:
    """``max(correct_floor, correct_bonus + min(cap, log2 s))`` for a correct kernel with speedup s
    (``min(cap, s)`` with ``log=False``); 0 when not correct. Below 1x the log term is negative, so a slow
    kernel earns less than a fast one, but a correct kernel however slow still earns `correct_floor` (> 0),
    more than any wrong one: without it every kernel at or under 0.5x scored like a wrong answer, and a
    group of slow correct and wrong answers gave no signal towards correctness."""
    if not result.correct:
        return 0.0
    s = _speedup(result)
    if s is None:
        return correct_bonus
    term = min(cap, math.log2(s)) if log else min(cap, s)
    return max(correct_floor, correct_bonus + term)


@REWARDS.register("coverage", "pr")
def coverage_reward(
    result: EvalResult, *, cap: float = 3.0, coverage_weight: float = 1.0,
) -> float:
    """Dr. Kernel's reward with profiling (PR): ``1[correct] * (1 + min(s, cap) + w * coverage)``,
    the capped speedup s rewarded linearly and the coverage (see `coverage`) added so lazy kernels
    that leave most work to torch earn less. 0 when not correct."""
    if not result.correct:
        return 0.0
    s = _speedup(result) or 0.0
    return 1.0 + min(s, cap) + coverage_weight * coverage(result)


@REWARDS.register("milestone")
def milestone_reward(
    result: EvalResult, *, steps: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0),
    compile_credit: float = 0.1, correct_credit: float = 0.5, step_credit: float = 0.5,
) -> float:
    """Stepped milestones: ``compile_credit`` once it builds and runs (incorrect), ``correct_credit`` once
    correct, then ``step_credit`` more for each speedup milestone strictly passed (default 1x, 1.5x, 2x, 3x)."""
    if result.status == Status.INCORRECT:
        return compile_credit
    if not result.correct:
        return 0.0
    s = _speedup(result) or 0.0
    return compile_credit + correct_credit + step_credit * sum(1 for t in steps if s > t)


@REWARDS.register("speedup_vs_compile", "speedup_compile")
def speedup_vs_compile_reward(
    result: EvalResult, *, correct_bonus: float = 1.0, cap: float = 3.0, mode: str = "log",
    margin: float = 0.05, fallback: str = "eager", correct_floor: float = CORRECT_FLOOR,
) -> float:
    """A reward against ``torch.compile`` rather than eager PyTorch: CUDA Agent (ByteDance Seed, 2026)
    measures its kernels' speedup against the compiled reference. Needs ``EvalConfig.compile_baseline``
    (``timing.compiled_reference_ms``); with s_c = compiled reference time / candidate time:

    - ``mode="log"``: ``max(correct_floor, correct_bonus + min(cap, log2 s_c))`` for a correct kernel,
      else 0 (the `speedup` reward's form with the compiled baseline);
    - ``mode="stepped"``: ``1[correct] * (1 + 1[s > 1 + margin] + 1[s_c > 1 + margin])`` with s the
      eager speedup: correct, faster than eager, faster than torch.compile each earn one step.

    Without a compiled timing, ``fallback="eager"`` uses the eager speedup in its place, ``"none"``
    gives only the correctness part (``correct_bonus``, or 1 when stepped).
    """
    if not result.correct:
        return 0.0
    if mode not in ("log", "stepped"):
        raise ValueError(f"speedup_vs_compile: mode must be log or stepped, got {mode!r}")
    t = result.timing
    s_c: float | None = None
    if t is not None and t.meaningful and t.compiled_reference_ms and t.candidate_ms:
        s_c = t.compiled_reference_ms / max(t.candidate_ms, 1e-9)
    elif fallback == "eager":
        s_c = _speedup(result)
    if mode == "stepped":
        s = _speedup(result) or 0.0
        return 1.0 + float(s > 1.0 + margin) + float(s_c is not None and s_c > 1.0 + margin)
    if s_c is None or s_c <= 0:
        return correct_bonus
    return max(correct_floor, correct_bonus + min(cap, math.log2(s_c)))


def hard_violations(result: EvalResult) -> int:
    """AutoTriton's hard rules as the gym records them: an outright rejection, a static anti-hacking
    finding, or a verdict without any call into the candidate's own kernel each count once."""
    n = int(result.status == Status.REJECTED)
    n += int(bool(result.static_findings))
    n += int(result.status in (Status.OK, Status.INCORRECT) and sum(result.kernel_calls.values()) == 0)
    return n


def soft_violations(result: EvalResult, *, min_coverage: float = 0.5) -> int:
    """The rules a hybrid-mode gym (``torch_ops="allow"``, KernelGYM's default) lets through rather than
    rejects: torch compute ops in forward, and (for a correct kernel) a profiling coverage (`coverage`)
    below `min_coverage`. Each counts once."""
    n = int(bool(result.torch_ops))
    n += int(result.correct and coverage(result) < min_coverage)
    return n


def rule_violations(result: EvalResult, *, min_coverage: float = 0.5) -> int:
    """All of AutoTriton's rules the gym's verdict breaks: `hard_violations` + `soft_violations`."""
    return hard_violations(result) + soft_violations(result, min_coverage=min_coverage)


@REWARDS.register("autotriton", "rule_based")
def autotriton_reward(
    result: EvalResult, *, execution: str = "binary", rule_weight: float = 1.0,
    soft_penalty: float = 0.5, min_coverage: float = 0.5,
) -> float:
    """AutoTriton (Li et al. 2025): a rule-based reward combined with the execution reward.

    Hard rules (`hard_violations`: rejected, static finding, own kernel never called) veto:
    ``R = R_exec * (1 - rule_weight * 1[hard > 0])`` (``rule_weight = 1``: ``R = 0``). Soft rules
    (`soft_violations`: torch compute in forward, coverage below `min_coverage`), which a hybrid-mode gym
    records instead of rejecting, are penalised: ``R = R_exec * max(0, 1 - soft_penalty * n_soft)``,
    so a lazy kernel still earns less than a full one but more than a wrong one (``soft_penalty = 1``
    turns any soft breach into the veto). ``execution`` names the execution reward.
    """
    base = REWARDS.get(execution)(result)
    if hard_violations(result):
        return base * (1.0 - rule_weight)
    return base * max(0.0, 1.0 - soft_penalty * soft_violations(result, min_coverage=min_coverage))


def get_reward(name: str, **options: Any) -> Callable[[EvalResult], float]:
    """The reward registered as `name`, with `options` bound."""
    fn = REWARDS.get(name)
    return partial(fn, **options) if options else fn
