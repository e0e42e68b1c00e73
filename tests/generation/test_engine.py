import pytest
import torch

from kernelrl.generation import Engine, GenerationRequest, SamplingParams
from kernelrl.generation.tiny import build_tiny_causal_lm

from .helpers import PROMPTS, encode

SAMPLED = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, max_new_tokens=12, ignore_eos=True)


def requests(tokenizer, params=SAMPLED, lengths=(5, 17, 9, 3, 12, 7)):
    return [
        GenerationRequest(encode(tokenizer, PROMPTS[i % len(PROMPTS)]), params.replace(seed=i, max_new_tokens=n), str(i))
        for i, n in enumerate(lengths)
    ]


def test_batched_results_match_each_request_run_alone(model, tokenizer):
    reqs = requests(tokenizer)
    batched = Engine(model, tokenizer, max_batch_size=3).generate(reqs)
    for req, res in zip(reqs, batched, strict=True):
        alone = Engine(model, tokenizer, max_batch_size=1).generate([req])[0]
        assert res.token_ids == alone.token_ids
        assert res.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
        assert res.finish_reason == "length"
        assert len(res.token_ids) == req.params.max_new_tokens
        assert res.policy_versions == [0] * len(res.token_ids)
        assert res.prompt_token_ids == list(req.prompt_token_ids)


def test_greedy_matches_transformers_generate(model, tokenizer):
    params = SamplingParams(temperature=0.0, max_new_tokens=15, ignore_eos=True)
    reqs = requests(tokenizer, params, lengths=(15, 15, 15))
    results = Engine(model, tokenizer, max_batch_size=2).generate(reqs)
    for req, res in zip(reqs, results, strict=True):
        ids = torch.tensor([req.prompt_token_ids])
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=15,
                             min_new_tokens=15, pad_token_id=0)
        assert res.token_ids == ref[0, ids.shape[1] :].tolist()
        assert res.logprobs == [0.0] * 15  # greedy is a point mass


def test_finished_sequence_frees_its_slot_for_a_waiting_one(llama, tokenizer):
    # Two slots, lengths 3, 20, 5, 5. A newcomer gets two tokens in its first step (prefill + decode):
    # A ends at step 2, C takes its row at step 3 and ends at 6, D takes it at 7 and ends at 10.
    engine = Engine(llama, tokenizer, max_batch_size=2)
    for i, n in enumerate((3, 20, 5, 5)):
        engine.add(GenerationRequest([5, 6, 7 + i], SAMPLED.replace(max_new_tokens=n, seed=i), "ABCD"[i]))
    finished_at, running = {}, []
    step = 0
    while engine.has_unfinished():
        step += 1
        for res in engine.step():
            finished_at[res.request_id] = step
        running.append(engine.num_running)
    assert finished_at == {"A": 2, "C": 6, "D": 10, "B": 19}  # static batches of 2 would need 23 steps
    assert max(running) <= 2
    assert engine.stats.reused_slots == 2
    assert engine.stats.generated_tokens == 33


def test_prompts_of_different_lengths_are_not_padded_to_the_longest(llama, tokenizer):
    engine = Engine(llama, tokenizer, max_batch_size=4)
    long_prompt = list(range(10, 70))
    reqs = [
        GenerationRequest(long_prompt, SAMPLED.replace(max_new_tokens=2, seed=0), "long"),
        GenerationRequest([5, 6, 7], SAMPLED.replace(max_new_tokens=30, seed=1), "short1"),
        GenerationRequest([8, 9], SAMPLED.replace(max_new_tokens=30, seed=2), "short2"),
    ]
    engine.generate(reqs)
    assert engine.stats.prefill_padding_tokens <= 1  # the long prompt is prefilled on its own
    # after the long sequence leaves, the cache is compacted to the short rows' width
    assert engine.stats.decode_padding_fraction < 0.2


def test_stop_token_ends_generation_after_it(model, tokenizer):
    req = requests(tokenizer, lengths=(12,))[0]
    free = Engine(model, tokenizer).generate([req])[0]
    stop = free.token_ids[4]
    first = free.token_ids.index(stop)
    res = Engine(model, tokenizer).generate([GenerationRequest(req.prompt_token_ids, req.params.replace(stop_token_ids=(stop,)))])[0]
    assert res.token_ids == free.token_ids[: first + 1]
    assert (res.finish_reason, res.stop_reason) == ("stop", stop)


def test_eos_stops_unless_ignored(tokenizer):
    model = build_tiny_causal_lm(len(tokenizer), seed=5)
    req = requests(tokenizer, lengths=(12,))[0]
    free = Engine(model, tokenizer).generate([req])[0]
    model.generation_config.eos_token_id = free.token_ids[3]
    engine = Engine(model, None)
    assert free.token_ids[3] in engine.eos_token_ids
    res = engine.generate([GenerationRequest(req.prompt_token_ids, req.params.replace(ignore_eos=False))])[0]
    assert res.finish_reason == "stop" and res.token_ids == free.token_ids[: free.token_ids.index(free.token_ids[3]) + 1]
    assert engine.generate([req])[0].token_ids == free.token_ids


def test_stop_string_ends_generation_at_the_completing_token(model, tokenizer):
    req = requests(tokenizer, lengths=(30,))[0]
    free = Engine(model, tokenizer).generate([req])[0]
    texts = [tokenizer.decode(free.token_ids[: i + 1]) for i in range(len(free.token_ids))]
    target = texts[10][-2:]
    end = next(i for i, t in enumerate(texts) if target in t)
    res = Engine(model, tokenizer).generate([GenerationRequest(req.prompt_token_ids, req.params.replace(stop_strings=(target,)))])[0]
    assert res.token_ids == free.token_ids[: end + 1]
    assert (res.finish_reason, res.stop_reason) == ("stop", target)
    assert target in res.text


def test_context_limit_ends_with_length(llama, tokenizer):
    engine = Engine(llama, tokenizer, max_context=20)
    res = engine.generate([GenerationRequest(list(range(5, 20)), SAMPLED.replace(max_new_tokens=50, seed=0))])[0]
    assert res.finish_reason == "length" and len(res.token_ids) == 5


def test_bad_input_fails_fast_with_clear_errors(llama, tokenizer):
    engine = Engine(llama, tokenizer)
    with pytest.raises(ValueError, match="context of 128 tokens"):
        engine.add(GenerationRequest(list(range(5, 5 + 128)), request_id="long"))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.add(GenerationRequest([5, 10_000]))
    with pytest.raises(ValueError, match="stop_strings needs an engine with a tokenizer"):
        Engine(llama).add(GenerationRequest([5], SamplingParams(stop_strings=("x",))))
    with pytest.raises(ValueError, match="max_batch_size"):
        Engine(llama, max_batch_size=0)
    engine.add(GenerationRequest([5], request_id="dup"))
    with pytest.raises(ValueError, match="already in the engine"):
        engine.add(GenerationRequest([6], request_id="dup"))
    with pytest.raises(RuntimeError, match="idle engine"):
        engine.generate([GenerationRequest([7], request_id="other")])
    assert [r.request_id for r in engine.abort_all()] == ["dup"]
    engine.add(GenerationRequest([6], request_id="dup"))  # the id is free again
    with pytest.raises(ValueError, match="aborted partial of the same request"):
        engine.add(GenerationRequest([6], request_id="x"), resume_from=engine.abort_all()[0])


def test_seeds_make_samples_reproducible_and_distinct(llama, tokenizer):
    p = SAMPLED.replace(max_new_tokens=20)
    prompt = encode(tokenizer, "import torch")
    reqs = [GenerationRequest(prompt, p.replace(seed=s), str(i)) for i, s in enumerate((7, 7, 8))]
    a, b, c = Engine(llama, tokenizer).generate(reqs)
    assert a.token_ids == b.token_ids != c.token_ids
    unseeded = [GenerationRequest(prompt, p, str(i)) for i in range(2)]
    x = Engine(llama, tokenizer, seed=1).generate(unseeded)
    y = Engine(llama, tokenizer, seed=1).generate(unseeded)
    assert [r.token_ids for r in x] == [r.token_ids for r in y]
    assert x[0].token_ids != x[1].token_ids


def test_abort_and_resume_continue_the_same_sample(model, tokenizer):
    req = requests(tokenizer, lengths=(25,))[0]
    full = Engine(model, tokenizer).generate([req])[0]
    engine = Engine(model, tokenizer, max_batch_size=2)
    engine.add(req)
    for _ in range(9):
        assert engine.step() == []
    partial = engine.abort(req.request_id)
    # 9 steps = 10 tokens: the first step samples once after the prefill and once after a decode
    assert partial is not None and partial.finish_reason == "abort" and len(partial.token_ids) == 10
    assert not engine.has_unfinished()
    engine.update_weights(model.state_dict())  # same weights, new version
    engine.add(req, resume_from=partial)
    res = _drain(engine)[0]
    assert res.token_ids == full.token_ids
    assert res.logprobs == pytest.approx(full.logprobs, abs=1e-4)
    assert res.policy_versions == [0] * 10 + [1] * 15


def test_update_weights_requeues_running_sequences(llama, tokenizer):
    engine = Engine(llama, tokenizer, max_batch_size=4)
    reqs = requests(tokenizer, lengths=(10, 10))
    ref = Engine(llama, tokenizer).generate(reqs)
    for r in reqs:
        engine.add(r)
    for _ in range(4):
        engine.step()
    assert engine.update_weights() == 1
    assert engine.num_running == 0 and engine.num_waiting == 2
    out = sorted(_drain(engine), key=lambda r: r.request_id)
    assert [r.token_ids for r in out] == [r.token_ids for r in ref]
    assert all(r.policy_versions == [0] * 5 + [1] * 5 for r in out)


def test_top_logprobs_are_the_processed_top_k(llama, tokenizer):
    req = GenerationRequest(encode(tokenizer, "def add"), SAMPLED.replace(logprobs=5, top_k=3, seed=1))
    res = Engine(llama, tokenizer).generate([req])[0]
    assert res.top_token_ids is not None and res.top_logprobs is not None
    for tok, lp, ids, lps in zip(res.token_ids, res.logprobs, res.top_token_ids, res.top_logprobs, strict=True):
        assert len(ids) == 3  # top_k=3 leaves 3 tokens with non-zero probability
        assert lps == sorted(lps, reverse=True)
        assert tok in ids and lps[ids.index(tok)] == pytest.approx(lp)
        assert sum(torch.tensor(lps).exp().tolist()) == pytest.approx(1.0, abs=1e-5)


def _drain(engine):
    out = []
    while engine.has_unfinished():
        out.extend(engine.step())
    return out


def test_model_mode_is_left_as_found(tokenizer):
    model = build_tiny_causal_lm(len(tokenizer), seed=2).train()
    res = Engine(model, tokenizer).generate(requests(tokenizer, lengths=(4,)))
    assert model.training and len(res[0].token_ids) == 4


def test_samples_of_one_prompt_share_one_prefill(llama, tokenizer):
    prompt = encode(tokenizer, PROMPTS[2])
    reqs = [GenerationRequest(prompt, SAMPLED.replace(seed=i, max_new_tokens=6 + i), str(i)) for i in range(6)]
    engine = Engine(llama, tokenizer, max_batch_size=3)  # later samples arrive after the first prefill
    shared = engine.generate(reqs)
    assert engine.stats.prefill_tokens == len(prompt) and engine.stats.prefix_cache_hits == 5
    plain = Engine(llama, tokenizer, max_batch_size=3, prefix_cache_tokens=0)
    alone = plain.generate(reqs)
    assert plain.stats.prefill_tokens == 4 * len(prompt)  # only samples admitted together share a prefill
    assert [r.token_ids for r in shared] == [r.token_ids for r in alone]
    assert len({tuple(r.token_ids) for r in shared}) == 6  # distinct seeds, distinct samples
    engine.update_weights()  # new weights: the cached prompt KV is stale and dropped
    engine.generate(reqs[:1])
    assert engine.stats.prefill_tokens == 2 * len(prompt)
