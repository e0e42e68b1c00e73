"""TRLOO (multi-turn, turn-level leave-one-out) and per-episode returns, by hand."""

from __future__ import annotations

import pytest
import torch
from rl_helpers import t

from kernelrl.rl import episode_returns, trloo_advantages

# prompt 5: episode 10 (turns 0,1,2: rewards 1, 0, 2), 11 (turns 0,1: 0, 4), 12 (turn 0: 3)
# prompt 9: episode 13 (turns 0,1: 1, 1). Rows in a scrambled order.
ROWS = [  # (prompt, episode, turn, reward)
    (5, 11, 1, 4.0),
    (9, 13, 0, 1.0),
    (5, 10, 2, 2.0),
    (5, 12, 0, 3.0),
    (5, 10, 0, 1.0),
    (9, 13, 1, 1.0),
    (5, 11, 0, 0.0),
    (5, 10, 1, 0.0),
]
PROMPT = torch.tensor([r[0] for r in ROWS])
EPISODE = torch.tensor([r[1] for r in ROWS])
TURN = torch.tensor([r[2] for r in ROWS])
REWARD = t([r[3] for r in ROWS])
MASK = torch.ones(len(ROWS), 2, dtype=torch.bool)
MASK[3, 1] = False  # a shorter turn


def test_episode_returns_by_hand() -> None:
    # gamma 0.5: ep10: G2 = 2, G1 = 0 + 1 = 1, G0 = 1 + 0.5 = 1.5; ep11: G1 = 4, G0 = 2; ep12: 3;
    # ep13: G1 = 1, G0 = 1.5
    expected = t([4.0, 1.5, 2.0, 3.0, 1.5, 1.0, 2.0, 1.0])
    assert torch.allclose(episode_returns(REWARD, EPISODE, TURN, 0.5), expected)


def test_episode_returns_gamma_one_and_gaps_in_turn_index() -> None:
    # turn indices 0, 3, 7 of one episode: "next turn" is the next larger index
    out = episode_returns(t([1.0, 2.0, 4.0]), torch.tensor([0, 0, 0]), torch.tensor([7, 0, 3]), 1.0)
    # turn 0 (r=2): 2+4+1 = 7; turn 3 (r=4): 4+1 = 5; turn 7 (r=1): 1
    assert torch.allclose(out, t([1.0, 7.0, 5.0]))


def test_episode_returns_rejects_duplicates() -> None:
    with pytest.raises(ValueError):
        episode_returns(t([1.0, 2.0]), torch.tensor([0, 0]), torch.tensor([1, 1]))


def test_trloo_by_hand() -> None:
    # groups (prompt, turn): (5,0): ep10 1.5, ep11 2, ep12 3 -> 1.5-2.5=-1, 2-2.25=-0.25, 3-1.75=1.25
    # (5,1): ep10 1, ep11 4 -> -3, 3; (5,2): ep10 2 alone -> 2; (9,0): 1.5 alone; (9,1): 1 alone
    out = trloo_advantages(REWARD, PROMPT, MASK, turn_index=TURN, episode_ids=EPISODE, gamma=0.5)
    expected = t([3.0, 1.5, 2.0, 1.25, -1.0, 1.0, -0.25, -3.0])
    assert torch.allclose(out[:, 0], expected)
    assert torch.allclose(out[:, 1], torch.where(MASK[:, 1], expected, t(0.0)))


def test_trloo_counts_mask() -> None:
    # ep11's turn 1 does not count: it gets 0, and (5,1) becomes ep10 alone (keeps G = 1).
    # Its reward still feeds ep11's turn-0 return (2), so group (5,0) is unchanged.
    counts = torch.ones(len(ROWS), dtype=torch.bool)
    counts[0] = False
    out = trloo_advantages(REWARD, PROMPT, MASK, turn_index=TURN, episode_ids=EPISODE, counts=counts, gamma=0.5)
    expected = t([0.0, 1.5, 2.0, 1.25, -1.0, 1.0, -0.25, 1.0])
    assert torch.allclose(out[:, 0], expected)


def test_trloo_registry_call() -> None:
    from kernelrl.rl import ADVANTAGE_ESTIMATORS

    fn = ADVANTAGE_ESTIMATORS.get("trloo")
    out = fn(REWARD, PROMPT, MASK, turn_index=TURN, episode_ids=EPISODE, gamma=1.0)
    # gamma 1: returns ep10 3, 2, 2; ep11 4, 4; ep12 3; ep13 2, 1.
    # (5,0): 3, 4, 3 -> 3-3.5, 4-3, 3-3.5; (5,1): 2, 4 -> -2, 2
    assert torch.allclose(out[:, 0], t([2.0, 2.0, 2.0, -0.5, -0.5, 1.0, 1.0, -2.0]))
