import copy
import itertools
import random

import pytest
import torch

from kernelrl.generation import CoprisScheduler, Engine, PromptGroup, SamplingParams, expand_group


class RecordingEngine(Engine):
    """The real engine, noting what the scheduler asks of it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.adds: list[tuple[str, bool]] = []
        self.in_flight: list[int] = []

    def add(self, request, resume_from=None):
        self.adds.append((request.request_id, resume_from is not None))
        super().add(request, resume_from)

    def step(self):
        self.in_flight.append(self.num_running + self.num_waiting)
        return super().step()


def long_tailed_groups(n=4, seed=0, limit=None):
    """Groups whose samples have log-normal lengths (a few very long ones), seeded."""
    rng = random.Random(seed)
    for i in itertools.count() if limit is None else range(limit):
        lengths = [min(90, int(rng.lognormvariate(2.3, 0.9)) + 1) for _ in range(n)]
        params = tuple(SamplingParams(temperature=0.9, max_new_tokens=m, ignore_eos=True, seed=i) for m in lengths)
        yield PromptGroup(f"g{i}", (5, 6, 7, 8 + i % 40), params)


def make(llama, concurrency=8, groups_per_batch=3, early=True, source=None, engine_cls=RecordingEngine):
    engine = engine_cls(llama, max_batch_size=concurrency)
    sched = CoprisScheduler(engine, source if source is not None else long_tailed_groups(),
                            group_size=4, groups_per_batch=groups_per_batch, concurrency=concurrency,
                            early_termination=early)
    return engine, sched


def test_early_termination_returns_complete_groups_and_buffers_partials(llama):
    engine, sched = make(llama)
    batch = sched.next_batch()
    assert len(batch.groups) == 3
    for g in batch.groups:
        assert [r.request_id.split("/")[1] for r in g] == ["0", "1", "2", "3"]
        assert len({r.group_id for r in g}) == 1 and all(r.finished for r in g)
    assert not engine.has_unfinished()
    assert sched.buffered and all(p.finish_reason == "abort" and p.rng_state for p in sched.buffered)
    assert batch.stats.aborted == sum(1 for p in sched.buffered if p.token_ids)
    elsewhere = sum(len(r.token_ids) for r in (*sched.buffered, *sched.waiting_for_group))
    assert batch.stats.generated_tokens == batch.stats.batch_tokens + elsewhere


def test_a_fixed_number_of_samples_stay_in_flight(llama):
    engine, sched = make(llama, concurrency=6)
    for _ in range(3):
        sched.next_batch()
        engine.update_weights()
    assert engine.in_flight and set(engine.in_flight) == {6}
    assert engine.stats.max_running == 6


def test_partials_resume_first_and_keep_their_versions_and_logprobs(llama):
    engine, sched = make(copy.deepcopy(llama))  # its weights change below
    sched.next_batch()
    buffered = [p.request_id for p in sched.buffered]
    partials = {p.request_id: p for p in sched.buffered if p.token_ids}
    assert partials
    new_weights = copy.deepcopy(engine.model.state_dict())
    for t in new_weights.values():
        t.add_(0.01 * torch.randn_like(t))
    engine.update_weights(new_weights)  # the "trainer" step: version 1
    engine.adds.clear()
    collected = {}
    for _ in range(10):
        collected.update({r.request_id: r for g in sched.next_batch().groups for r in g})
        if set(partials) <= set(collected):
            break
    assert engine.adds[: len(buffered)] == [(rid, True) for rid in buffered]
    for rid, p in partials.items():
        r = collected[rid]
        k = len(p.token_ids)
        assert r.token_ids[:k] == p.token_ids and r.logprobs[:k] == p.logprobs
        assert r.policy_versions[:k] == [0] * k and set(r.policy_versions[k:]) == {1}
        assert len(r.token_ids) == PARAMS[rid].max_new_tokens  # the budget spans both parts


PARAMS = {f"{g.group_id}/{i}": p for g in long_tailed_groups(limit=200) for i, p in enumerate(g.params)}


def test_stale_token_accounting(llama):
    engine, sched = make(llama)
    sched.next_batch()
    engine.update_weights()
    batch = sched.next_batch()
    versions = [v for g in batch.groups for r in g for v in r.policy_versions]
    assert batch.stats.stale_tokens == versions.count(0) > 0
    assert batch.stats.batch_tokens == len(versions)
    assert batch.stats.tokens_by_version == {0: versions.count(0), 1: versions.count(1)}
    assert 0 < batch.stats.stale_fraction < 1


def test_interrupted_samples_equal_uninterrupted_ones_under_the_same_weights(llama):
    _, sched = make(llama, engine_cls=Engine)
    got = {}
    for _ in range(3):
        for g in sched.next_batch().groups:
            got[g[0].group_id] = g
    reference = Engine(llama, max_batch_size=8)
    for group in long_tailed_groups(limit=max(int(k[1:]) for k in got) + 1):
        if group.group_id in got:
            expected = reference.generate(expand_group(group, 4))
            assert [r.token_ids for r in got[group.group_id]] == [r.token_ids for r in expected]
            for a, b in zip(got[group.group_id], expected, strict=True):
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_synchronous_mode_generates_exactly_one_batch(llama):
    engine, sched = make(llama, early=False)
    for step in range(2):
        batch = sched.next_batch()
        assert sorted(g[0].group_id for g in batch.groups) == [f"g{3 * step + i}" for i in range(3)]
        assert batch.stats.aborted == 0 and batch.stats.stale_tokens == 0
        assert not sched.buffered and not engine.has_unfinished()
        assert all(len(r.token_ids) == PARAMS[r.request_id].max_new_tokens for g in batch.groups for r in g)
        engine.update_weights()
    assert engine.stats.max_running <= 8


@pytest.mark.parametrize("early", [True, False])
def test_finite_prompt_stream_is_drained(llama, early):
    _, sched = make(llama, early=early, source=long_tailed_groups(limit=5), groups_per_batch=2)
    sizes = [len(sched.next_batch().groups) for _ in range(4)]
    assert sizes == [2, 2, 1, 0]
    assert sched.exhausted


def test_bad_configuration_is_rejected(llama):
    engine = Engine(llama, max_batch_size=4)
    with pytest.raises(ValueError, match="max_batch_size"):
        CoprisScheduler(engine, [], group_size=2, groups_per_batch=1, concurrency=8)
    with pytest.raises(ValueError, match="group_size"):
        CoprisScheduler(engine, [], group_size=0, groups_per_batch=1, concurrency=4)
    with pytest.raises(ValueError, match="2 SamplingParams for a group of 3"):
        expand_group(PromptGroup("g", (5,), (SamplingParams(), SamplingParams())), 3)


def test_expand_group_gives_distinct_stable_seeds():
    g = PromptGroup("g7", (5, 6), SamplingParams(seed=1))
    a, b = expand_group(g, 3), expand_group(g, 3)
    assert [r.params.seed for r in a] == [r.params.seed for r in b]
    assert len({r.params.seed for r in a}) == 3
    assert [r.request_id for r in a] == ["g7/0", "g7/1", "g7/2"]
    assert expand_group(PromptGroup("g", (5,)), 2)[0].params.seed is None
