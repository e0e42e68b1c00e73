"""verl bridge: reward functions that score through `kernelrl serve`, and our estimators/losses in verl's registries.

Rewards, in a verl config:

    custom_reward_function.path=<site-packages>/kernelrl/integrations/verl.py
    custom_reward_function.name=compute_score            # verl's per-sample (naive) reward manager
    # or name=compute_score_batch with reward_model.reward_manager=batch (evaluates a batch concurrently)

The service URL and token come from KERNELRL_SERVE_URL / KERNELRL_SERVE_TOKEN. A service that
cannot be reached raises (a silent 0 would corrupt training); a completion without code scores 0.
The score is a `kernelrl.rewards` entry, `DEFAULT_REWARD` unless `custom_reward_function.reward_kwargs`
name another (``+custom_reward_function.reward_kwargs.reward=coverage``, options under ``reward_options``).

Estimators and losses: `register_with_verl()` puts them in verl's registries of the calling process;
estimators run in the driver, losses in the Ray actor workers, so let verl import
`kernelrl.integrations.verl_plugin` (which calls it) everywhere with
`VERL_USE_EXTERNAL_MODULES=kernelrl.integrations.verl_plugin`. Then select
`algorithm.adv_estimator=kernelrl_<name>` and `actor_rollout_ref.actor.policy_loss.loss_mode=kernelrl_<name>`.
verl hands an estimator only `token_level_rewards`, `response_mask`, `index` (uids) and the
`algorithm` config; options go under `+algorithm.kernelrl.<option>=...`, the discount is `algorithm.gamma`.

- `kernelrl_trloo`: multi-turn TRLOO; turns are the runs of `response_mask == 1` (agent-loop
  rollouts), each turn's reward sits on its tokens (`trloo_for_verl`).
- `kernelrl_prime`: `token_level_rewards` are the implicit process rewards (`prime_for_verl`); for the
  outcome source too, compute advantages with `compute_advantage_from_batch`, which also forwards
  `process_rewards` / `outcome_rewards` batch entries.
- `kernelrl_opd` (= `kernelrl_token_reward_direct`): `token_level_rewards` are the teacher's log-prob
  gains on the student's tokens, e.g. from `teacher_log_prob_delta` in a reward manager (`direct_opd_for_verl`).
- The rest (`grpo`, `drgrpo`, `rloo`, `reinforce++`, ...) through the generic `adapt_estimator`; policy
  losses through `adapt_loss` (verl's clip settings and global-batch loss normalisation). Top-K
  Direct-OPD (`opd_topk`) is not registered: verl's actor gives a loss only the sampled tokens' log-probs.
  Nor is `gae`: verl hands a registered estimator no critic values (use verl's own ``adv_estimator=gae``).

This module re-exports the bridge's parts: `verl_reward` (`compute_score`, `compute_score_batch`),
`verl_estimators` (estimator adapters, `compute_advantage_from_batch`; verl's inputs read in `verl_inputs`),
`verl_losses` (`adapt_loss`), `verl_opd` (teacher token rewards, `direct_opd_for_verl`) and
`verl_registration` (`register_with_verl`).
"""

from kernelrl.integrations.verl_estimators import (
    BATCH_EXTRAS,
    adapt_estimator,
    compute_advantage_from_batch,
    prime_for_verl,
    response_turns,
    trloo_for_verl,
)
from kernelrl.integrations.verl_losses import adapt_loss
from kernelrl.integrations.verl_opd import (
    direct_opd_for_verl,
    sampled_token_log_probs,
    teacher_log_prob_delta,
)
from kernelrl.integrations.verl_registration import PREFIX, register_with_verl
from kernelrl.integrations.verl_reward import compute_score, compute_score_batch

__all__ = [
    "BATCH_EXTRAS",
    "PREFIX",
    "adapt_estimator",
    "adapt_loss",
    "compute_advantage_from_batch",
    "compute_score",
    "compute_score_batch",
    "direct_opd_for_verl",
    "prime_for_verl",
    "register_with_verl",
    "response_turns",
    "sampled_token_log_probs",
    "teacher_log_prob_delta",
    "trloo_for_verl",
]
