"""The RL trainer: rollout -> gym verdicts -> rewards -> [PRIME PRM update] -> advantages -> clipped
policy loss (micro-batches, gradient accumulation, clipping, AdamW, LR schedule) -> logs -> checkpoint.

All math (advantages, losses, KL, entropy, mismatch weights, filters, PRIME) comes from `kernelrl.rl`
by name; rewards from `kernelrl.rewards`. This module only orchestrates.

Which samples count where: dynamic sampling (DAPO) drops whole (prompt, turn) groups from the batch
before advantages. PRS (Dr. Kernel's profiling-based rejection sampling) is a loss mask applied after
advantages, as in KernelGYM: a rejected turn still has its reward in its episode's earlier returns
and in the group baselines, but gets no policy loss (its rows skip the loss forward passes: a fully
masked row contributes exactly zero to every loss aggregation).

Numerics (the conventions, each with its source):

- Actions are the policy's own tokens: tool outputs are masked out of every loss and statistic, and
  GAE (`train.critic.episode_gae`) steps through and whitens over the actions only, skipping tool
  outputs like the feedback between turns (as verl's multi-turn GAE skips observation tokens).
- Three policies (decoupled PPO, Hilton et al. 2021, "Batch size-invariance for policy optimization";
  verl's rollout correction): pi_rollout sampled the tokens, pi_old anchors PPO's ratio and clip
  (Schulman et al. 2017, Eq. 7), pi_theta is trained. Mismatch corrections (`rl.mismatch`) weigh and
  reject by pi_old / pi_rollout, fixed for the whole update, never by pi_theta (see `_old_logprobs`).
- Loss denominators count what survives: the corrections' rejections shrink the micro-batch mask
  before its aggregate, and gradient accumulation weights each micro-batch by its count of the
  aggregation's units (`rl.aggregation_units`), so the step's gradient is that of the whole batch's
  aggregate over its kept tokens (verl, KernelGYM), whatever the micro-batching. Dr. GRPO's constant
  (``seq-mean-token-sum-norm``) is the generation budget ``rl.max_new_tokens``.
"""

from __future__ import annotations

import math
import random
import time
import warnings
from collections.abc import Hashable
from typing import Any, NamedTuple

import torch

from kernelrl.generation import Engine, SamplingParams
from kernelrl.rewards import coverage, get_reward, prs_keep_mask
from kernelrl.rl import (
    ADVANTAGE_ESTIMATORS,
    MISMATCH_CORRECTIONS,
    SAMPLE_FILTERS,
    aggregation_units,
    apply_corrections,
    entropy_bonus,
    implicit_process_rewards,
    kl_loss,
    kl_penalty,
    normalize_process_rewards,
    ppo_clip_loss,
    prm_cross_entropy_loss,
)
from kernelrl.rl.groups import key_ids
from kernelrl.rl.masked import masked_mean
from kernelrl.rl.registries import estimator_inputs
from kernelrl.train.config import RLConfig
from kernelrl.train.critic import Critic, episode_gae
from kernelrl.train.logprobs import pad_responses, response_logprobs
from kernelrl.train.model import clone_model
from kernelrl.train.rollout import EvalCache, Rollout, Sample


def lr_lambda(cfg: RLConfig) -> Any:
    """Warm-up then constant / cosine / linear decay to 0 over `cfg.steps` updates."""

    def f(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        if cfg.lr_schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        if cfg.lr_schedule == "linear":
            return max(0.0, 1 - frac)
        return 1.0

    return f


def _stack(samples: list[Sample], key: str) -> torch.Tensor:
    return torch.tensor([getattr(s, key) for s in samples])


def model_token_mask(samples: list[Sample], width: int) -> torch.Tensor:
    """``[N, width]`` bool: True at each response token the policy wrote (tool outputs and padding False)."""
    out = torch.zeros(len(samples), width, dtype=torch.bool)
    for i, s in enumerate(samples):
        m = s.model_mask()[:width]
        out[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    return out


class TurnGroup(NamedTuple):
    """The group a sample's advantage is relative to: its prompt group's samples at the same turn."""

    group: int
    turn: int


class Advantages(NamedTuple):
    """One update's advantages and loss mask over the N samples that survived dynamic sampling.

    ``samples``: the N rows; ``advantages [N, T]`` computed with every row present (PRS-rejected ones
    included); ``mask [N, T]``: the policy's response tokens (tool outputs are not); ``loss_rows [N]`` bool: rows that enter the policy
    loss (false: rejected by PRS); ``metrics``: kept fractions (and PRIME's PRM metrics); with a critic
    (``gae``) ``values [N, T]`` (the rollout's, before any update) and ``returns [N, T]`` (its targets).
    """

    samples: list[Sample]
    advantages: torch.Tensor
    mask: torch.Tensor
    loss_rows: torch.Tensor
    metrics: dict[str, float]
    values: torch.Tensor | None = None
    returns: torch.Tensor | None = None


class RLTrainer:
    """Owns the policy, its optimizer, the reference (PRIME's PRM, PPO's critic) and the rollout machinery."""

    def __init__(self, cfg: RLConfig, model: Any, tok: Any, cache: EvalCache, items: list[Hashable], *,
                 seed: int, max_context: int, cursor: int = 0) -> None:
        self.cfg, self.model, self.tok, self.seed = cfg, model, tok, seed
        self.pad = tok.pad_token_id or 0
        self.reward_fn = get_reward(cfg.reward, **cfg.reward_options)
        needs = estimator_inputs(cfg.algo)
        self.ref = clone_model(model) if (cfg.kl_coef > 0 or needs.process_rewards) else None
        self.prm = clone_model(model) if needs.process_rewards else None
        params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda(cfg))
        self.optimizers: dict[str, Any] = {"policy": self.opt, "sched": self.sched}
        if self.prm is not None:
            for p in self.prm.parameters():
                p.requires_grad_(True)
            self.prm.train()
            self.prm_opt = torch.optim.AdamW(self.prm.parameters(), lr=cfg.prime_lr, weight_decay=0.0)
            self.optimizers["prm"] = self.prm_opt
        # PPO with GAE: a critic copied from the policy as it is now, trained by its own AdamW (`train.critic`)
        self.critic = Critic(model, cfg, self.pad) if needs.values else None
        if self.critic is not None:
            self.optimizers["critic"] = self.critic.opt
        self.engine = Engine(model, tok, max_batch_size=max(cfg.concurrency, cfg.group_size * cfg.prompts_per_step),
                             max_context=max_context, seed=seed)
        sp = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
        self.rollout = Rollout(self.engine, tok, cache, items, group_size=cfg.group_size,
                               prompts_per_step=cfg.prompts_per_step, params=sp, mode=cfg.rollout,
                               concurrency=cfg.concurrency, turns=cfg.turns, seed=seed, cursor=cursor,
                               stop_at_first_correct=cfg.stop_at_first_correct, tools=cfg.tools,
                               max_tool_calls=cfg.max_tool_calls)
        self.step_count = 0
        self.mismatch_specs = cfg.mismatch_specs()
        for name, _ in self.mismatch_specs:
            MISMATCH_CORRECTIONS.get(name)  # an unknown name fails here, not mid-step
        aggregation_units(torch.ones(1, 1, dtype=torch.bool), cfg.loss_agg)  # so does a mode with no unit

    def checkpoint_models(self) -> dict[str, Any]:
        """The modules a checkpoint of this trainer holds, by name: the policy and, where they exist, the
        KL reference, PRIME's PRM and the critic (their optimizers are `optimizers`)."""
        extra = {"ref": self.ref, "prm": self.prm, "critic": self.critic.model if self.critic is not None else None}
        return {"policy": self.model, **{k: m for k, m in extra.items() if m is not None}}

    # ----------------------------------------------------------------- one update

    def _logprobs(self, model: Any, samples: list[Sample], grad: bool, entropy: bool = False) -> tuple[Any, Any, Any]:
        """Log-probs, entropies and the mask of the policy's own response tokens (tool outputs masked)."""
        with torch.set_grad_enabled(grad):
            lp, ent, mask = response_logprobs(model, [s.prompt_ids for s in samples], [s.response_ids for s in samples],
                                              pad_id=self.pad, with_entropy=entropy)
        return lp, ent, mask & model_token_mask(samples, mask.shape[1]).to(mask.device)

    def _chunks(self, n: int) -> list[list[int]]:
        m = self.cfg.micro_batch_size
        return [list(range(i, min(n, i + m))) for i in range(0, n, m)]

    def _batched_logprobs(self, model: Any, samples: list[Sample], width: int) -> torch.Tensor:
        out = torch.zeros(len(samples), width)
        for idx in self._chunks(len(samples)):
            lp, _, _ = self._logprobs(model, [samples[i] for i in idx], grad=False)
            out[idx, : lp.shape[1]] = lp.detach().cpu()
        return out

    def score(self, samples: list[Sample]) -> None:
        """Each sample's reward from its gym verdict (0 without one)."""
        for s in samples:
            s.reward = float(self.reward_fn(s.result)) if s.result is not None else 0.0

    def step(self) -> dict[str, float]:
        """One RL step; returns its metrics."""
        t0 = time.perf_counter()
        samples = self.rollout.collect()
        metrics: dict[str, float] = dict(self.rollout.last_stats)
        t_roll = time.perf_counter() - t0
        self.score(samples)
        first = [s for s in samples if s.turn == 0]
        metrics.update(self._outcome_metrics(first, prefix="rollout/"))
        metrics.update(self._coverage_metrics(samples))
        metrics["reward/mean"] = sum(s.reward for s in samples) / max(1, len(samples))
        metrics["response_length"] = sum(len(s.response_ids) for s in samples) / max(1, len(samples))
        if self.cfg.tools:
            metrics["rollout/tool_turn_fraction"] = sum(s.tool_calls > 0 for s in samples) / max(1, len(samples))
        metrics["eval/cache_hits"] = float(self.rollout.cache.hits)
        t1 = time.perf_counter()
        metrics.update(self._update(samples))
        self.step_count += 1
        metrics["lr"] = float(self.sched.get_last_lr()[0])
        metrics["time/train"] = time.perf_counter() - t1
        metrics["time/rollout_total"] = t_roll
        metrics["time/step"] = time.perf_counter() - t0
        return metrics

    def _outcome_metrics(self, samples: list[Sample], prefix: str) -> dict[str, float]:
        n = max(1, len(samples))
        ok = [s for s in samples if s.result is not None and s.result.correct]
        speedups = [s.result.speedup for s in ok if s.result is not None and s.result.speedup]
        return {f"{prefix}pass_rate": len(ok) / n, f"{prefix}fast_1": sum(1 for x in speedups if x > 1.0) / n,
                f"{prefix}mean_speedup": sum(speedups) / len(speedups) if speedups else 0.0}

    @staticmethod
    def _coverage_metrics(samples: list[Sample], low: float = 0.5) -> dict[str, float]:
        """Lazy optimisation (Dr. Kernel) among the correct turns of a step: ``rollout/lazy_share`` =
        share with profiling coverage below `low` (`rewards.coverage`), ``rollout/coverage_mean``."""
        covs = [coverage(s.result) for s in samples if s.result is not None and s.result.correct]
        if not covs:
            return {"rollout/lazy_share": 0.0, "rollout/coverage_mean": 0.0, "rollout/correct_turns": 0.0}
        return {"rollout/lazy_share": sum(c < low for c in covs) / len(covs),
                "rollout/coverage_mean": sum(covs) / len(covs), "rollout/correct_turns": float(len(covs))}

    def _prs_keep(self, samples: list[Sample]) -> list[bool]:
        """PRS decision per sample (True: enters the loss); all True when PRS is off. Episodes are the
        samples sharing (group, episode); a turn without a verdict is kept like an incorrect one.
        ``geometric``: one draw per episode on the geometric mean of its correct turns' coverages,
        deciding all of them (KernelGYM draws per turn); ``per_turn``: each correct turn on its own."""
        cfg = self.cfg
        if cfg.prs == "off":
            return [True] * len(samples)
        trajs = list(self._episodes(samples).values())
        masks = prs_keep_mask([[samples[i].result for i in tr] for tr in trajs],
                              mode=cfg.prs, rng=random.Random(self.seed + self.step_count))
        keep = [True] * len(samples)
        for tr, m in zip(trajs, masks, strict=True):
            for i, k in zip(tr, m, strict=True):
                keep[i] = k
        return keep

    def _dynamic_sampling(self, samples: list[Sample]) -> list[int]:
        """Indices of the samples whose (prompt, turn) group has reward variance (all when off)."""
        if not (self.cfg.dynamic_sampling and samples):
            return list(range(len(samples)))
        keep = SAMPLE_FILTERS.get("zero_variance")(_stack(samples, "reward").float(), self._group_ids(samples))
        return [i for i, k in enumerate(keep.tolist()) if k]

    def _accuracy_filter(self, samples: list[Sample]) -> list[bool]:
        """PRIME's accuracy filter (Cui et al. 2025, "Process Reinforcement through Implicit Rewards"):
        keep a prompt only when its group accuracy lies in ``[low, high]`` (`rl.accuracy_filter`); all
        True when off. Accuracy of a prompt = the share of its episodes solved (some turn correct), so a
        multi-turn episode counts once whatever its length; the whole prompt (every turn) is kept or dropped."""
        if self.cfg.accuracy_filter is None or not samples:
            return [True] * len(samples)
        low, high = self.cfg.accuracy_filter
        solved: dict[tuple[int, int], float] = {}
        for s in samples:
            ok = 1.0 if s.result is not None and s.result.correct else 0.0
            solved[(s.group, s.episode)] = max(solved.get((s.group, s.episode), 0.0), ok)
        keys = list(solved)
        keep = SAMPLE_FILTERS.get("accuracy_range")(torch.tensor([solved[k] for k in keys]),
                                                    torch.tensor([k[0] for k in keys]), low=low, high=high)
        by_group = {k[0]: bool(v) for k, v in zip(keys, keep.tolist(), strict=True)}
        return [by_group[s.group] for s in samples]

    def advantages_and_mask(self, samples: list[Sample]) -> Advantages:
        """Advantages and the loss mask of one update on scored samples.

        PRS decides on every sample (whole episodes); PRIME's accuracy filter drops whole prompts whose
        accuracy is outside its range; dynamic sampling then drops zero-variance (prompt, turn) groups; advantages run over all remaining rows, PRS-rejected ones included, so their
        rewards stay in earlier turns' returns and in the baselines (KernelGYM: advantages first, then
        the rejected turns' response mask is zeroed). PRIME also updates its PRM here, on the loss rows.
        """
        cfg = self.cfg
        prs = self._prs_keep(samples)
        acc = self._accuracy_filter(samples)
        idx = [i for i in self._dynamic_sampling(samples) if acc[i]]
        rows = [samples[i] for i in idx]
        loss_rows = torch.tensor([prs[i] for i in idx], dtype=torch.bool)
        n = max(1, len(samples))
        metrics: dict[str, float] = {"kept_fraction": float(loss_rows.sum()) / n}
        if cfg.accuracy_filter is not None:
            metrics["accuracy_filter/dropped_fraction"] = acc.count(False) / n
        if cfg.prs != "off":
            metrics["prs/rejected_fraction"] = prs.count(False) / n
        _, resp = pad_responses([s.response_ids for s in rows], self.pad)
        mask = resp & model_token_mask(rows, resp.shape[1])  # tool-output tokens: context, not actions
        rewards = _stack(rows, "reward").float()
        if self.critic is not None and rows:  # values and targets also when no row enters the policy loss
            values = self.critic.values(rows, mask.shape[1])
            # GAE steps through, and whitens over, the policy's own tokens only (tool outputs are skipped)
            adv, returns = episode_gae(list(self._episodes(rows).values()), rewards, values, mask,
                                       gamma=cfg.gamma, lam=cfg.gae_lambda)
            adv = adv if bool(loss_rows.any()) else torch.zeros(mask.shape)
            return Advantages(rows, adv, mask, loss_rows, metrics, values, returns)
        if not bool(loss_rows.any()):
            return Advantages(rows, torch.zeros(mask.shape), mask, loss_rows, metrics)
        # an estimator of episodes (TRLOO) keys its groups by (prompt, turn) itself; the others get them here
        needs = estimator_inputs(cfg.algo)
        group_ids = torch.tensor([s.group for s in rows]) if needs.episodes else self._group_ids(rows)
        extras: dict[str, Any] = {}
        if needs.episodes:
            extras = {"turn_index": _stack(rows, "turn"), "episode_ids": self._episode_ids(rows), "gamma": cfg.gamma}
        if needs.process_rewards:
            extras["process_rewards"], prm_metrics = self._prime_update(rows, mask, loss_rows)
            metrics.update(prm_metrics)
        adv = ADVANTAGE_ESTIMATORS.get(cfg.algo)(rewards, group_ids, mask, **extras)
        return Advantages(rows, adv, mask, loss_rows, metrics)

    @staticmethod
    def _episodes(samples: list[Sample]) -> dict[tuple[int, int], list[int]]:
        """Row indices of each episode (later turns keep their episode's (group, episode) key), in turn order."""
        episodes: dict[tuple[int, int], list[int]] = {}
        for i, s in enumerate(samples):
            episodes.setdefault((s.group, s.episode), []).append(i)
        return {k: sorted(v, key=lambda i: samples[i].turn) for k, v in episodes.items()}

    def update_critic(self, batch: Advantages, epochs: int = 1) -> dict[str, float]:
        """`epochs` critic steps on a batch's rows towards its GAE returns (PPO's clipped value loss)."""
        if self.critic is None or batch.values is None or batch.returns is None or not batch.samples:
            return {}
        return self.critic.update(batch.samples, batch.values, batch.returns, batch.mask, epochs)

    def critic_step(self, epochs: int = 1) -> dict[str, float]:
        """Critic pretraining (CUDA Agent, Dai et al. 2026): one rollout of the frozen actor, then `epochs`
        critic steps towards its GAE returns; the policy, its optimizer and its LR schedule stay untouched."""
        if self.critic is None:
            raise ValueError(f"critic pretraining needs rl.algo=gae (a critic); rl.algo is {self.cfg.algo!r}")
        samples = self.rollout.collect()
        self.score(samples)
        metrics = {**self._outcome_metrics([s for s in samples if s.turn == 0], prefix="rollout/"),
                   "reward/mean": sum(s.reward for s in samples) / max(1, len(samples))}
        metrics.update(self.update_critic(self.advantages_and_mask(samples), epochs))
        return metrics

    @staticmethod
    def _group_ids(samples: list[Sample]) -> torch.Tensor:
        """Ids of the samples' (prompt group, turn) groups (`TurnGroup`)."""
        return key_ids([TurnGroup(s.group, s.turn) for s in samples])

    def update(self, samples: list[Sample]) -> dict[str, float]:
        """The policy update on scored samples (filters, advantages, clipped loss, optimizer step)."""
        return self._update(samples)

    def _update(self, samples: list[Sample]) -> dict[str, float]:
        cfg = self.cfg
        batch = self.advantages_and_mask(samples)
        metrics = dict(batch.metrics)
        metrics.update(self.update_critic(batch))  # from the rollout's values: independent of the policy step
        train = [i for i, k in enumerate(batch.loss_rows.tolist()) if k]
        if not train:  # nothing to learn from (e.g. every group had zero reward variance): the schedule still advances
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
                self.sched.step()
            return metrics
        # the loss mask: rows PRS rejected leave only now, after their rewards shaped the advantages
        kept = [batch.samples[i] for i in train]
        adv, mask = batch.advantages[train], batch.mask[train]
        width = mask.shape[1]
        rollout_lp = torch.zeros(len(kept), width)
        for i, s in enumerate(kept):
            rollout_lp[i, : len(s.rollout_logprobs)] = torch.tensor(s.rollout_logprobs)
        old_lp = self._old_logprobs(kept, rollout_lp)
        ref_lp = self._batched_logprobs(self.ref, kept, width) if self.ref is not None and cfg.kl_coef > 0 else None
        agg = {"agg": cfg.loss_agg, "max_length": cfg.max_new_tokens}  # Dr. GRPO's constant: the generation budget
        params = [p for p in self.model.parameters() if p.requires_grad]
        sums: dict[str, float] = {}
        for _ in range(cfg.ppo_epochs):
            self.opt.zero_grad(set_to_none=True)
            units, epoch_loss = 0.0, 0.0
            for idx in self._chunks(len(kept)):
                mb = [kept[i] for i in idx]
                lp, ent, m = self._logprobs(self.model, mb, grad=True, entropy=True)
                w = lp.shape[1]
                m_old = lp.detach() if old_lp is None else old_lp[idx, :w]  # None: one on-policy epoch
                m_adv, m_roll = adv[idx, :w], rollout_lp[idx, :w]
                weights = None
                if self.mismatch_specs:  # decoupled PPO: pi_old / pi_rollout, fixed for the whole update
                    corr = apply_corrections(self.mismatch_specs, m_old, m_roll, m)
                    weights, m = corr.weights, corr.mask & m
                    for k, v in corr.metrics.items():
                        sums[f"is/{k}"] = sums.get(f"is/{k}", 0.0) + float(v) * len(idx)
                out = ppo_clip_loss(lp, m_old, m_adv, m, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                    dual_clip=cfg.dual_clip, weights=weights, **agg)
                loss = out.loss
                if ent is not None and cfg.entropy_coef > 0:
                    loss = loss + entropy_bonus(ent, m, coef=cfg.entropy_coef, **agg)
                if ref_lp is not None:
                    loss = loss + cfg.kl_coef * kl_loss(lp, ref_lp[idx, :w], m, kind=cfg.kl_kind, **agg)
                    sums["kl_ref"] = sums.get("kl_ref", 0.0) + float(
                        masked_mean(kl_penalty(lp.detach(), ref_lp[idx, :w], m, cfg.kl_kind), m)) * len(idx)
                # gradient accumulation: each micro-batch's aggregate times its count of the aggregation's
                # units (kept tokens, or sequences with a kept token); the sum is divided by the total below
                n_units = float(aggregation_units(m, cfg.loss_agg))
                (loss * n_units).backward()
                units += n_units
                epoch_loss += float(loss.detach()) * n_units
                for k, v in out.metrics.items():
                    sums[k] = sums.get(k, 0.0) + float(v) * len(idx)
                sums["entropy"] = sums.get("entropy", 0.0) + float(masked_mean(ent.detach(), m)) * len(idx)
            sums["loss"] = sums.get("loss", 0.0) + epoch_loss / max(1.0, units) * len(kept)
            if units == 0:  # every token rejected by the corrections: nothing to step on
                continue
            for p in params:
                if p.grad is not None:
                    p.grad.div_(units)
            gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            self.opt.step()
            sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(gn) * len(kept)
        self.sched.step()
        denom = len(kept) * cfg.ppo_epochs
        metrics.update({k: v / denom for k, v in sums.items()})
        metrics["adv_abs_mean"] = float(adv.abs().sum() / mask.sum().clamp_min(1))
        self.engine.update_weights()  # the engine shares the module: bump the version, drop stale KV
        return metrics

    def _old_logprobs(self, kept: list[Sample], rollout_lp: torch.Tensor) -> torch.Tensor | None:
        """pi_old of the update's rows ``[N, T]``, the policy PPO's ratio and clip are anchored at; None
        when it is the detached forward of the update itself (one on-policy epoch: ratio 1, no extra pass).

        - ``sync``: the current policy, frozen before the first epoch (a forward pass when there are
          several epochs);
        - ``copris`` without mismatch corrections: the behaviour log-probs, each token's from the policy
          version that sampled it (CoPRIS's cross-stage importance sampling; verl's *bypass* mode);
        - ``copris`` with corrections: the current policy (a forward pass), so the corrections weigh
          pi_old / pi_behaviour once and PPO clips pi_theta / pi_old (decoupled PPO, Hilton et al.
          2021; verl's *decoupled* mode); bypassing would count the behaviour ratio twice.
        """
        cfg = self.cfg
        if cfg.rollout == "copris" and not self.mismatch_specs:
            return rollout_lp
        if cfg.rollout == "sync" and cfg.ppo_epochs == 1:
            return None
        return self._batched_logprobs(self.model, kept, rollout_lp.shape[1])

    @staticmethod
    def _episode_ids(samples: list[Sample]) -> torch.Tensor:
        ids: dict[tuple[int, int], int] = {}  # (group, episode): later turns keep their episode's key
        return torch.tensor([ids.setdefault((s.group, s.episode), len(ids)) for s in samples])

    def _prime_update(self, rows: list[Sample], mask: torch.Tensor,
                      train: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """PRIME: process rewards ``[N, T]`` for every row from the implicit PRM (before its update), then
        one PRM step on the outcome labels of the rows in the loss (``train [N]`` bool, PRS applied)."""
        assert self.prm is not None and self.ref is not None
        width = mask.shape[1]
        ref_lp = self._batched_logprobs(self.ref, rows, width)
        labels = torch.tensor([1.0 if s.result is not None and s.result.correct else 0.0 for s in rows])
        with torch.no_grad():
            prm_lp = self._batched_logprobs(self.prm, rows, width)
        proc = normalize_process_rewards(implicit_process_rewards(prm_lp, ref_lp, mask, beta=self.cfg.prime_beta), mask)
        self.prm_opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        members = [i for i, k in enumerate(train.tolist()) if k]
        for chunk in self._chunks(len(members)):
            idx = [members[j] for j in chunk]
            lp, _, m = self._logprobs(self.prm, [rows[i] for i in idx], grad=True)
            r = implicit_process_rewards(lp, ref_lp[idx, : lp.shape[1]], m, beta=self.cfg.prime_beta)
            loss = prm_cross_entropy_loss(r, m, labels[idx]) * (len(idx) / len(members))
            loss.backward()
            loss_sum += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(self.prm.parameters(), self.cfg.max_grad_norm)
        self.prm_opt.step()
        return proc, {"prime/prm_loss": loss_sum, "prime/process_reward_mean": float(masked_mean(proc, mask))}
