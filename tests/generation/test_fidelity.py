import copy

import pytest
import torch

from kernelrl.generation import (
    Engine,
    GenerationRequest,
    SamplingParams,
    logprob_gap,
    teacher_forced_logprobs,
)

from .helpers import PROMPTS, encode

MIXED = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=20),
    SamplingParams(temperature=1.3, top_p=0.9),
    SamplingParams(temperature=0.9, top_k=50, top_p=0.8, logprobs=3),
    SamplingParams(temperature=0.0),
]


def mixed_requests(tokenizer):
    return [
        GenerationRequest(
            encode(tokenizer, PROMPTS[i % len(PROMPTS)]),
            MIXED[i % len(MIXED)].replace(max_new_tokens=8 + 5 * (i % 4), seed=i, ignore_eos=True),
            str(i),
        )
        for i in range(10)
    ]


def test_engine_logprobs_match_teacher_forcing(model, tokenizer):
    reqs = mixed_requests(tokenizer)
    results = Engine(model, tokenizer, max_batch_size=3).generate(reqs)  # continuous batching, mixed lengths
    gap = logprob_gap(model, reqs, results)
    assert gap.num_tokens == sum(len(r.token_ids) for r in results)
    assert gap.max < 1e-4, gap
    assert gap.mean < 1e-5, gap


def test_gap_detects_a_different_policy(llama, tokenizer):
    reqs = mixed_requests(tokenizer)[:4]
    results = Engine(llama, tokenizer).generate(reqs)
    other = copy.deepcopy(llama)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert logprob_gap(other, reqs, results).mean > 1e-2


def test_teacher_forced_logprobs_by_hand(llama):
    prompt, response = [5, 6, 7], [8, 9]
    params = SamplingParams(temperature=0.5)
    with torch.no_grad():
        logits = llama(torch.tensor([prompt + response])).logits[0]
    expected = [torch.log_softmax(logits[2 + t] / 0.5, -1)[response[t]].item() for t in range(2)]
    assert teacher_forced_logprobs(llama, prompt, response, params).tolist() == pytest.approx(expected, abs=1e-5)


def test_resumed_sample_keeps_fidelity(llama, tokenizer):
    req = mixed_requests(tokenizer)[3]
    engine = Engine(llama, tokenizer)
    engine.add(req)
    for _ in range(5):
        engine.step()
    partial = engine.abort_all()[0]
    engine.add(req, resume_from=partial)
    res = []
    while engine.has_unfinished():
        res += engine.step()
    assert logprob_gap(llama, [req], res).max < 1e-4
