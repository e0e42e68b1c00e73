"""Typed request/result records of the generation layer; each round-trips through JSON.

`SamplingParams` validates itself and names the offending field in its error; log-probs in a
`GenerationResult` are under the sampling distribution actually used (after temperature, top-k,
top-p), and each generated token carries the `policy_version` of the weights that produced it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "abort"]
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request.

    temperature: 0 means greedy (a point mass: the chosen token's log-prob is 0).
    top_p: nucleus mass in (0, 1]; 1 disables it. top_k: 0 disables it.
    max_new_tokens: budget of generated tokens (>= 1), counted over all resumptions of a request.
    stop_token_ids / stop_strings: generation ends after the token that produces one; the
    tokenizer's EOS is a stop token too unless `ignore_eos`.
    seed: per-request seed; None lets the engine draw one from its own seeded stream.
    logprobs: how many top-K (token id, log-prob) pairs to return per position (0 = none).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: int = 0

    def __post_init__(self) -> None:
        # Accept lists (e.g. from JSON) but store tuples so the record stays hashable and frozen.
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        _check(_is_real(self.temperature) and math.isfinite(self.temperature) and self.temperature >= 0,
               "SamplingParams.temperature", "a finite number >= 0", self.temperature)
        _check(_is_real(self.top_p) and 0 < self.top_p <= 1, "SamplingParams.top_p", "in (0, 1]", self.top_p)
        _check(_is_int(self.top_k) and self.top_k >= 0, "SamplingParams.top_k", "an integer >= 0 (0 disables it)", self.top_k)
        _check(_is_int(self.max_new_tokens) and self.max_new_tokens >= 1,
               "SamplingParams.max_new_tokens", "an integer >= 1", self.max_new_tokens)
        _check(all(_is_int(t) and t >= 0 for t in self.stop_token_ids),
               "SamplingParams.stop_token_ids", "non-negative integers", self.stop_token_ids)
        _check(all(isinstance(s, str) and s for s in self.stop_strings),
               "SamplingParams.stop_strings", "non-empty strings", self.stop_strings)
        _check(isinstance(self.ignore_eos, bool), "SamplingParams.ignore_eos", "a bool", self.ignore_eos)
        _check(self.seed is None or _is_int(self.seed), "SamplingParams.seed", "an integer or None", self.seed)
        _check(_is_int(self.logprobs) and self.logprobs >= 0, "SamplingParams.logprobs", "an integer >= 0", self.logprobs)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with `changes` applied (validated again)."""
        return SamplingParams(**{**asdict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop_token_ids"] = list(self.stop_token_ids)
        d["stop_strings"] = list(self.stop_strings)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingParams:
        return cls(**d)


@dataclass(frozen=True)
class GenerationRequest:
    """One sequence to sample: prompt token ids, how to sample, and who it belongs to.

    group_id ties the n samples of one prompt together (GRPO-style groups, CoPRIS).
    """

    prompt_token_ids: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = "0"
    group_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_token_ids", tuple(self.prompt_token_ids))
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.request_id!r}: prompt_token_ids is empty")
        _check(all(_is_int(t) and t >= 0 for t in self.prompt_token_ids),
               f"request {self.request_id!r}: prompt_token_ids", "non-negative integers",
               [t for t in self.prompt_token_ids if not (_is_int(t) and t >= 0)][:3])
        if not isinstance(self.params, SamplingParams):
            raise TypeError(f"request {self.request_id!r}: params must be SamplingParams, got {type(self.params)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_token_ids": list(self.prompt_token_ids),
            "params": self.params.to_dict(),
            "request_id": self.request_id,
            "group_id": self.group_id,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GenerationRequest:
        return cls(
            prompt_token_ids=d["prompt_token_ids"],
            params=SamplingParams.from_dict(d.get("params", {})),
            request_id=d.get("request_id", "0"),
            group_id=d.get("group_id"),
        )


@dataclass
class GenerationResult:
    """What one request produced (possibly partially, when `finish_reason == "abort"`).

    token_ids, logprobs, policy_versions: length T each; logprobs[t] is log p(token_ids[t]) under
    the processed sampling distribution, policy_versions[t] the weights version that sampled it.
    top_token_ids / top_logprobs: T lists of up to K entries (most likely first) when requested,
    else None; entries with probability 0 under the processed distribution are left out.
    stop_reason: the stop token id or stop string that ended generation, if any.
    rng_state: the request's sampler state (base64) when aborted, so a resumption continues
    the same random stream.
    """

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy_versions: list[int] = field(default_factory=list)
    finish_reason: FinishReason = "length"
    group_id: str | None = None
    top_token_ids: list[list[int]] | None = None
    top_logprobs: list[list[float]] | None = None
    stop_reason: int | str | None = None
    text: str | None = None
    rng_state: str | None = None

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}")
        n = len(self.token_ids)
        if len(self.logprobs) != n or len(self.policy_versions) != n:
            raise ValueError(
                f"result {self.request_id!r}: token_ids ({n}), logprobs ({len(self.logprobs)}) and "
                f"policy_versions ({len(self.policy_versions)}) must have the same length"
            )
        if (self.top_token_ids is None) != (self.top_logprobs is None):
            raise ValueError(f"result {self.request_id!r}: top_token_ids and top_logprobs go together")

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason != "abort"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GenerationResult:
        return cls(**d)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _check(ok: bool, name: str, expected: str, got: object) -> None:
    if not ok:
        raise ValueError(f"{name} must be {expected}, got {got!r}")
