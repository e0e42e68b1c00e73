import math

import pytest
import torch

from kernelrl.generation.sampling import (
    generator_state,
    make_generator,
    process_logits,
    restore_generator,
    sample_rows,
    top_logprobs,
)

P = torch.tensor([0.5, 0.25, 0.15, 0.1])
NEG = -math.inf


def proc(logits, temperature=1.0, top_k=0, top_p=1.0):
    b = logits.shape[0]
    return process_logits(
        logits, torch.full((b,), float(temperature)), torch.full((b,), top_k), torch.full((b,), float(top_p))
    )


def test_temperature_scales_logits():
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    out = proc(logits, temperature=2.0)
    expected = torch.log_softmax(torch.tensor([0.0, 0.5, 1.0]), -1)
    torch.testing.assert_close(out[0], expected)


def test_top_k_keeps_k_most_likely_and_renormalises():
    out = proc(torch.tensor([[0.0, 1.0, 2.0, 3.0]]), top_k=2)
    # softmax over {2, 3}: log(e^2/(e^2+e^3)) = -log(1+e)
    assert out[0, 0] == NEG and out[0, 1] == NEG
    torch.testing.assert_close(out[0, 2:], torch.tensor([-math.log(1 + math.e), -math.log(1 + 1 / math.e)]))


def test_top_p_keeps_smallest_prefix_reaching_the_mass():
    logits = P.log().unsqueeze(0)
    out = proc(logits, top_p=0.7)  # 0.5 + 0.25 >= 0.7: keep the first two
    torch.testing.assert_close(out[0, :2].exp(), torch.tensor([2 / 3, 1 / 3]))
    assert torch.isinf(out[0, 2:]).all()
    out = proc(logits, top_p=0.8)  # needs the third token too
    torch.testing.assert_close(out[0, :3].exp(), torch.tensor([0.5, 0.25, 0.15]) / 0.9)
    out = proc(logits, top_p=0.3)  # the most likely token is always kept
    assert out[0, 0] == 0 and torch.isinf(out[0, 1:]).all()


def test_top_k_then_top_p_applies_on_renormalised_mass():
    logits = P.log().unsqueeze(0)
    # top_k=3 renormalises to [0.5, 0.25, 0.15]/0.9; 0.5/0.9 + 0.25/0.9 = 0.833 >= 0.8
    out = proc(logits, top_k=3, top_p=0.8)
    torch.testing.assert_close(out[0, :2].exp(), torch.tensor([2 / 3, 1 / 3]))


def test_greedy_is_a_point_mass_on_the_argmax():
    out = proc(torch.tensor([[0.3, 2.0, 1.0]]), temperature=0.0)
    assert out[0].tolist() == [NEG, 0.0, NEG]


def test_rows_are_processed_independently():
    logits = torch.randn(3, 50)
    out = process_logits(logits, torch.tensor([0.7, 0.0, 1.3]), torch.tensor([5, 0, 0]), torch.tensor([1.0, 1.0, 0.6]))
    single = [proc(logits[0:1], 0.7, 5, 1.0), proc(logits[1:2], 0.0), proc(logits[2:3], 1.3, 0, 0.6)]
    torch.testing.assert_close(out, torch.cat(single))


def test_sampling_follows_the_processed_distribution():
    lp = proc(P.log().unsqueeze(0), top_k=3)
    g = make_generator(0)
    n = 6000
    counts = torch.bincount(torch.cat([sample_rows(lp, [g]) for _ in range(n)]), minlength=4).double() / n
    assert counts[3] == 0  # filtered by top_k: never drawn
    torch.testing.assert_close(counts[:3], (P[:3] / P[:3].sum()).double(), atol=0.025, rtol=0)


def test_each_row_uses_only_its_own_generator():
    lp = torch.log_softmax(torch.randn(4, 30), -1)
    together = sample_rows(lp, [make_generator(s) for s in range(4)])
    alone = torch.cat([sample_rows(lp[i : i + 1], [make_generator(i)]) for i in range(4)])
    assert torch.equal(together, alone)


def test_generator_state_round_trips():
    g = make_generator(123)
    torch.rand(5, generator=g)
    state = generator_state(g)
    a = torch.rand(5, generator=g)
    b = torch.rand(5, generator=restore_generator(state))
    assert torch.equal(a, b)


@pytest.mark.parametrize("k", [1, 3])
def test_top_logprobs_are_sorted(k):
    lp = torch.log_softmax(torch.randn(2, 10), -1)
    ids, vals = top_logprobs(lp, k)
    assert ids.shape == (2, k)
    assert torch.equal(vals, lp.gather(-1, ids))
    assert (vals[:, :-1] >= vals[:, 1:]).all()
    assert torch.equal(ids[:, 0], lp.argmax(-1))
