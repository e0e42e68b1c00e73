"""Response log-probs with shared prompts equal the joint forward, values and gradients."""

from __future__ import annotations

import torch

from kernelrl.generation.tiny import build_tiny_causal_lm
from kernelrl.train.logprobs import response_logprobs


def _batch() -> tuple[list[list[int]], list[list[int]]]:
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(5, 90, (n,), generator=gen).tolist() for n in (7, 12, 3)]
    group_prompts = [prompts[i // 3] for i in range(9)]  # three groups of three samples
    responses = [torch.randint(5, 90, (int(n),), generator=gen).tolist()
                 for n in torch.randint(2, 9, (9,), generator=gen)]
    responses[4] = responses[4][:1]  # a one-token response
    return group_prompts, responses


def _run(model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]], share: bool):
    model.zero_grad(set_to_none=True)
    logp, ent, mask = response_logprobs(model, prompts, responses, with_entropy=True, share_prompts=share)
    (logp.sum() + 0.1 * ent.sum()).backward()
    return logp.detach(), ent.detach(), mask, [p.grad.clone() for p in model.parameters()]


def test_shared_prompts_match_the_joint_forward() -> None:
    model = build_tiny_causal_lm(96, arch="llama", max_position_embeddings=64).train()
    prompts, responses = _batch()
    joint, shared = _run(model, prompts, responses, False), _run(model, prompts, responses, True)
    assert torch.equal(joint[2], shared[2])
    assert torch.allclose(joint[0], shared[0], atol=1e-5) and torch.allclose(joint[1], shared[1], atol=1e-5)
    assert (joint[0][joint[2]] != 0).all()  # every response token is scored
    for a, b in zip(joint[3], shared[3], strict=True):  # equal up to float summation order
        assert (a - b).abs().max() <= 1e-5 * a.abs().max() + 1e-7
    # the scores are the model's: a one-sample forward of prompt + response gives the same values
    i = 5
    ids = torch.tensor([prompts[i] + responses[i]])
    with torch.no_grad():
        ref = torch.log_softmax(model(input_ids=ids).logits[0], -1)
    n, p = len(responses[i]), len(prompts[i])
    expected = ref[torch.arange(p - 1, p - 1 + n), torch.tensor(responses[i])]
    assert torch.allclose(shared[0][i, :n], expected, atol=1e-5)
