"""Direct on-policy distillation (OPD) for verl: the teacher's token reward and its advantage estimator."""

from __future__ import annotations

from typing import Any

from kernelrl.integrations.verl_inputs import (
    kernelrl_option,
    outcome_coef_for,
    per_sample_tensor,
    uid_group_ids,
)


def direct_opd_for_verl(token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None,
                        outcome_rewards: Any = None, **_: Any) -> tuple[Any, Any]:
    """`kernelrl_opd` / `kernelrl_token_reward_direct`: Direct-OPD's ``token_reward_direct`` advantage.

    Data contract: ``token_level_rewards [B, T]`` is the teacher's per-token gain
    ``log pi_T(a_t) - log pi_Tref(a_t)`` on the student's sampled tokens (a reward manager computes it,
    e.g. with `teacher_log_prob_delta`). ``A_t = token_coef * r_t``, plus ``outcome_coef`` times the GRPO
    outcome advantage when ``outcome_rewards [B]`` arrives (only through `compute_advantage_from_batch`;
    verl's own `compute_advantage` forwards no outcome). Options (`algorithm.kernelrl.*`):
    ``token_coef`` (1), ``outcome_coef`` (1 when an outcome is present). Returns (advantages, advantages).
    """
    from kernelrl.rl import token_reward_direct_advantages

    outcome = per_sample_tensor(outcome_rewards, token_level_rewards)
    outcome_coef = outcome_coef_for(config, outcome, "kernelrl_opd")
    groups = None if outcome is None else uid_group_ids(index, outcome.shape[0], outcome.device)
    advantages = token_reward_direct_advantages(outcome, groups, response_mask, token_rewards=token_level_rewards,
                                                token_coef=float(kernelrl_option(config, "token_coef", 1.0)),
                                                outcome_coef=outcome_coef)
    return advantages, advantages


def sampled_token_log_probs(model: Any, input_ids: Any, attention_mask: Any, response_length: int,
                            position_ids: Any = None) -> Any:
    """Log-probs a HF causal LM gives the last ``response_length`` tokens of verl's ``input_ids``.

    input_ids, attention_mask ``[B, L]`` (verl: left-padded prompt then right-padded response),
    position_ids ``[B, L]`` or None (then ``cumsum(attention_mask) - 1``) -> ``[B, response_length]`` float32.
    """
    import torch

    if position_ids is None:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logits = logits[:, -response_length - 1:-1].float()
    targets = input_ids[:, -response_length:]
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def teacher_log_prob_delta(teacher: Any, teacher_ref: Any, input_ids: Any, attention_mask: Any, responses: Any,
                           response_mask: Any = None, position_ids: Any = None, micro_batch_size: int = 8) -> Any:
    """Direct-OPD token reward for a verl batch: ``log pi_T(a_t) - log pi_Tref(a_t)`` on the response tokens.

    teacher / teacher_ref: HF causal LMs sharing the student's tokenizer. input_ids, attention_mask,
    position_ids ``[B, L]`` and responses ``[B, R]`` as in a verl batch; response_mask ``[B, R]``
    (default: the response part of attention_mask) -> ``[B, R]``, zero off the response mask
    (`kernelrl.rl.opd_token_rewards`). Use as ``token_level_rewards`` for ``kernelrl_opd``.
    """
    import torch

    from kernelrl.rl import opd_token_rewards

    length = responses.shape[-1]
    mask = attention_mask[:, -length:] if response_mask is None else response_mask
    teacher_lp, ref_lp = [], []
    with torch.no_grad():
        for start in range(0, input_ids.shape[0], micro_batch_size):
            part = slice(start, start + micro_batch_size)
            args = (input_ids[part], attention_mask[part], length, None if position_ids is None else position_ids[part])
            teacher_lp.append(sampled_token_log_probs(teacher, *args))
            ref_lp.append(sampled_token_log_probs(teacher_ref, *args))
    return opd_token_rewards(torch.cat(teacher_lp), torch.cat(ref_lp), mask)
