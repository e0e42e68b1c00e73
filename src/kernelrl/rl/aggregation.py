"""Loss aggregation: how a ``[B, T]`` per-token loss becomes a scalar.

Modes (registered in `LOSS_AGGREGATIONS`):

- ``token-mean``: ``sum_{i,t} l m / sum_{i,t} m`` (DAPO's token-level loss);
- ``seq-mean-token-mean``: mean over sequences of each sequence's token mean (GRPO, DeepSeekMath
  Eq. 3: ``1/G sum_i 1/|o_i| sum_t``);
- ``seq-mean-token-sum``: mean over sequences of each sequence's token sum;
- ``seq-mean-token-sum-norm``: ``sum_{i,t} l m / (S * L)`` with a constant L (Dr. GRPO, Liu et
  al. 2025: the per-response ``1/|o_i|`` is replaced by a constant, the generation budget).

Sequence means run over the S sequences that have at least one valid token, so fully masked
rows (rejected samples, padding rows) never change the result.

Micro-batching (`aggregation_units`): a batch's aggregate is the sum over its micro-batches of each
one's aggregate times its count of the mode's units (valid tokens for ``token-mean``, non-empty
sequences for the ``seq-mean-*`` modes), divided by the batch's total count, exactly, whatever the
split (``seq-mean-token-sum-norm`` needs a fixed ``max_length`` for that).
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernelrl.rl.masked import as_bool_mask, mask_count, masked_sum
from kernelrl.rl.registries import LOSS_AGGREGATIONS


def _num_seqs(mask: Tensor, dtype: torch.dtype) -> Tensor:
    return mask.any(dim=-1).sum().to(dtype).clamp_min(1)


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean(loss: Tensor, mask: Tensor, *, max_length: int | None = None) -> Tensor:
    """``sum(l * m) / sum(m)`` over all valid tokens; ``[B, T] -> []`` (0 if nothing is valid)."""
    m = as_bool_mask(mask)
    return masked_sum(loss, m) / mask_count(m, None, loss.dtype).clamp_min(1)


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(loss: Tensor, mask: Tensor, *, max_length: int | None = None) -> Tensor:
    """``1/S sum_i (sum_t l m / sum_t m)`` over non-empty rows; ``[B, T] -> []``."""
    m = as_bool_mask(mask)
    per_seq = masked_sum(loss, m, -1) / mask_count(m, -1, loss.dtype).clamp_min(1)
    return per_seq.sum() / _num_seqs(m, loss.dtype)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum(loss: Tensor, mask: Tensor, *, max_length: int | None = None) -> Tensor:
    """``1/S sum_i sum_t l m`` over non-empty rows; ``[B, T] -> []``."""
    m = as_bool_mask(mask)
    return masked_sum(loss, m) / _num_seqs(m, loss.dtype)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(loss: Tensor, mask: Tensor, *, max_length: int | None = None) -> Tensor:
    """``1/(S L) sum_i sum_t l m`` (Dr. GRPO); ``L = max_length``, or T when None.

    Pass the generation budget as ``max_length``: with the default the result depends on how far
    the batch is padded. ``[B, T] -> []``.
    """
    m = as_bool_mask(mask)
    length = m.shape[-1] if max_length is None else max_length
    if length <= 0:
        raise ValueError("max_length must be positive")
    return masked_sum(loss, m) / (_num_seqs(m, loss.dtype) * length)


#: what each mode averages over, for gradient accumulation: "tokens" (valid tokens) or "sequences"
#: (rows with a valid token). A newly registered mode must say which here.
AGGREGATION_UNITS: dict[str, str] = {"token-mean": "tokens", "seq-mean-token-mean": "sequences",
                                     "seq-mean-token-sum": "sequences", "seq-mean-token-sum-norm": "sequences"}


def aggregation_units(mask: Tensor, mode: str = "token-mean") -> Tensor:
    """How many units mode `mode` averages a ``[B, T]`` micro-batch's loss over: its valid tokens or its
    non-empty rows (see the module docstring), as a float scalar. Unknown modes raise ``ValueError``."""
    unit = AGGREGATION_UNITS.get(mode)
    if unit is None:
        raise ValueError(f"loss aggregation {mode!r} names no unit for micro-batching; add it to "
                         f"kernelrl.rl.aggregation.AGGREGATION_UNITS ('tokens' or 'sequences')")
    m = as_bool_mask(mask)
    return mask_count(m) if unit == "tokens" else m.any(dim=-1).sum().to(torch.float32)


def aggregate_loss(loss: Tensor, mask: Tensor, mode: str = "token-mean", *, max_length: int | None = None) -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar with the named mode (see module docstring)."""
    return LOSS_AGGREGATIONS.get(mode)(loss, mask, max_length=max_length)
