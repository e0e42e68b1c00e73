"""`aggregation_units`: weighting micro-batches by it reproduces the whole batch's aggregate exactly."""

from __future__ import annotations

import pytest
import torch

from kernelrl.rl import LOSS_AGGREGATIONS, aggregate_loss, aggregation_units


@pytest.mark.parametrize("mode", list(LOSS_AGGREGATIONS))
def test_micro_batches_weighted_by_units_give_the_batch_aggregate(mode: str) -> None:
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(7, 9, generator=g)
    mask = torch.rand(7, 9, generator=g) > 0.4
    mask[3] = False  # a fully rejected row: no unit, no weight
    whole = aggregate_loss(loss, mask, mode, max_length=12)
    for split in ([2, 2, 2, 1], [1] * 7, [5, 2]):
        parts = list(zip(loss.split(split), mask.split(split), strict=True))
        total = sum(float(aggregation_units(m, mode)) for _, m in parts)
        acc = sum(float(aggregate_loss(lo, m, mode, max_length=12)) * float(aggregation_units(m, mode))
                  for lo, m in parts)
        assert acc / total == pytest.approx(float(whole), rel=1e-5, abs=1e-7)


def test_units_count_kept_tokens_or_non_empty_rows() -> None:
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    assert float(aggregation_units(mask, "token-mean")) == 3.0
    assert float(aggregation_units(mask, "seq-mean-token-mean")) == 2.0
    with pytest.raises(ValueError, match="no unit"):
        aggregation_units(mask, "made-up-mode")
