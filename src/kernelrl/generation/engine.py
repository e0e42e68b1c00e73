"""Continuous-batching sampling engine for any `transformers` causal LM with a KV cache.

The running sequences are rows ("slots") of one batched KV cache. Each `step()` first prefills
waiting requests into the slots that sequences finishing in the previous step left free (their
KV rows are overwritten in place; the prefill samples each newcomer's first token), then runs one
batched decode forward that gives every running sequence one more token. Prompts are prefilled
in groups of similar length (bounded padding); slots nobody takes leave the cache, and columns
that are padding in every row are dropped (see `BatchKVCache`). Every request samples with its
own torch.Generator, so its tokens depend on its seed and its logits only, not on what else
shares the batch.
"""

from __future__ import annotations

import inspect
import random
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache

from kernelrl.generation.kv_cache import BatchKVCache, cache_kwarg, new_cache
from kernelrl.generation.lean_decode import LeanDecoder
from kernelrl.generation.prefix_cache import PrefixCache, PrefixEntry, batch_from_entries, entry_from_row
from kernelrl.generation.records import GenerationRequest, GenerationResult
from kernelrl.generation.sampling import (
    generator_state,
    make_generator,
    params_tensors,
    process_logits,
    restore_generator,
    sample_rows,
    top_logprobs,
)
from kernelrl.generation.stopping import StopChecker


@dataclass
class EngineStats:
    """Counters since the engine was built (or `reset_stats`)."""

    steps: int = 0
    forward_calls: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0
    prefill_padding_tokens: int = 0
    decode_kv_columns: int = 0
    decode_kv_padding_columns: int = 0
    max_running: int = 0
    reused_slots: int = 0  # newcomers whose KV went into a finished sequence's row in place
    prefix_cache_hits: int = 0  # newcomers that needed no prefill of their own (shared prompt)

    @property
    def decode_padding_fraction(self) -> float:
        """Fraction of key/value columns attended over in decode steps that were padding."""
        return self.decode_kv_padding_columns / max(1, self.decode_kv_columns)


@dataclass
class _Seq:
    request: GenerationRequest
    generator: torch.Generator
    stop: StopChecker
    budget: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    top_ids: list[list[int]] | None = None
    top_lps: list[list[float]] | None = None
    pos: int = 0  # tokens of this sequence in the KV cache = next position id

    @property
    def context(self) -> list[int]:
        return [*self.request.prompt_token_ids, *self.token_ids]


class Engine:
    """Batched sampling with continuous batching, per-token log-probs and policy versions.

    model: a `transformers` causal LM whose forward takes `attention_mask`, `position_ids` and a
    `DynamicCache`. tokenizer: optional; needed for stop strings and `GenerationResult.text`.
    max_batch_size: sequences decoded together. max_prefill_tokens: padded tokens per prefill
    forward. max_context: total prompt + generated tokens (defaults to the model's positions).
    prefix_cache_tokens: how many prompt tokens of prefilled KV to keep for reuse (0 = off).
    lean_decode: decode steps of Llama-family models skip `transformers`' per-call machinery
    (`LeanDecoder`, same weights and cache); other models always use the model's forward.
    policy_version: stamped on every generated token. Change weights only through
    `update_weights`: it bumps the version and drops KV computed by the old weights.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any | None = None,
        *,
        max_batch_size: int = 16,
        max_prefill_tokens: int = 4096,
        max_context: int | None = None,
        seed: int = 0,
        policy_version: int = 0,
        prefix_cache_tokens: int = 16384,
        lean_decode: bool = True,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.config.vocab_size)
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self.max_context = max_context or _context_limit(model.config)
        self.eos_token_ids = _eos_ids(model, tokenizer)
        self.policy_version = policy_version
        self.stats = EngineStats()
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = cache_kwarg(model)
        self._logits_to_keep = "logits_to_keep" in params
        self._lean = LeanDecoder.for_model(model) if lean_decode else None
        self._seeds = random.Random(seed)
        self._waiting: deque[_Seq] = deque()
        self._slots: list[_Seq | None] = []  # cache row -> sequence; None = finished, row reusable
        self._kv: BatchKVCache | None = None
        self._ids: set[str] = set()  # request ids waiting or running
        self._prefix = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None

    # ----------------------------------------------------------------- public API

    def add(self, request: GenerationRequest, resume_from: GenerationResult | None = None) -> None:
        """Queue `request`; with `resume_from` (an aborted partial of it) continue where it stopped.

        A resumed request keeps the partial's tokens, log-probs and versions, re-prefills
        prompt + partial tokens under the current weights, and continues the partial's random
        stream; its token budget is what `max_new_tokens` leaves after the partial.
        """
        rid = request.request_id
        if rid in self._ids:
            raise ValueError(f"request {rid!r} is already in the engine")
        if resume_from is not None and (resume_from.request_id != rid or resume_from.finished):
            raise ValueError(
                f"request {rid!r}: resume_from must be an aborted partial of the same request, got "
                f"{resume_from.request_id!r} with finish_reason {resume_from.finish_reason!r}"
            )
        prompt = request.prompt_token_ids
        bad = [t for t in prompt if t >= self.vocab_size]
        if bad:
            raise ValueError(f"request {rid!r}: token ids {bad[:3]} are outside the vocabulary ({self.vocab_size})")
        done = list(resume_from.token_ids) if resume_from else []
        if len(prompt) + len(done) >= self.max_context:
            raise ValueError(
                f"request {rid!r}: prompt of {len(prompt)} tokens"
                + (f" + {len(done)} resumed tokens" if done else "")
                + f" leaves no room in the model context of {self.max_context} tokens"
            )
        budget = min(request.params.max_new_tokens, self.max_context - len(prompt))
        if len(done) >= budget:
            raise ValueError(f"request {rid!r}: the partial already used its budget of {budget} tokens")
        stop = StopChecker(request.params, self.tokenizer, self.eos_token_ids)
        if resume_from is not None and resume_from.rng_state is not None:
            gen = restore_generator(resume_from.rng_state, self.device)
        else:
            seed = request.params.seed if request.params.seed is not None else self._seeds.getrandbits(63)
            gen = make_generator(seed, self.device)
        seq = _Seq(request, gen, stop, budget)
        if resume_from is not None:
            seq.token_ids, seq.logprobs = done, list(resume_from.logprobs)
            seq.versions = list(resume_from.policy_versions)
        if request.params.logprobs:
            have = resume_from is not None and resume_from.top_token_ids is not None
            seq.top_ids = [list(x) for x in resume_from.top_token_ids] if have else [[] for _ in done]
            seq.top_lps = [list(x) for x in resume_from.top_logprobs] if have else [[] for _ in done]
        self._waiting.append(seq)
        self._ids.add(rid)

    def step(self) -> list[GenerationResult]:
        """Advance every running sequence by one token, admit waiting ones; return the finished.

        The model runs in eval mode (no dropout) during the step and gets its mode back after,
        so a trainer may share the module.
        """
        with eval_mode(self.model), torch.inference_mode():
            finished = self._admit()
            self._compact()
            if self._slots:
                self._decode()
                finished += self._retire()
        self.stats.steps += 1
        return finished

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Run `requests` to completion on an idle engine; results in the order of `requests`."""
        if self.has_unfinished():
            raise RuntimeError("generate() needs an idle engine; drain it with step() or abort_all()")
        ids = [r.request_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("request ids must be unique within one generate() call")
        try:
            for r in requests:
                self.add(r)
        except Exception:
            self.abort_all()  # leave the engine idle, not half-loaded
            raise
        results: dict[str, GenerationResult] = {}
        while self.has_unfinished():
            for res in self.step():
                results[res.request_id] = res
        return [results[i] for i in ids]

    def abort(self, request_id: str) -> GenerationResult | None:
        """Stop one request; its partial result (finish_reason "abort"), or None if unknown."""
        for seq in list(self._waiting):
            if seq.request.request_id == request_id:
                self._waiting.remove(seq)
                return self._result(seq, "abort", None)
        for i, seq in enumerate(self._slots):
            if seq is not None and seq.request.request_id == request_id:
                self._slots[i] = None
                self._compact()
                return self._result(seq, "abort", None)
        return None

    def abort_all(self) -> list[GenerationResult]:
        """Stop everything; partial results of running then waiting requests."""
        out = [self._result(s, "abort", None) for s in (*self._live(), *self._waiting)]
        self._slots, self._waiting, self._kv = [], deque(), None
        return out

    def update_weights(self, state_dict: dict[str, torch.Tensor] | None = None, version: int | None = None) -> int:
        """Load new weights (optional) and bump `policy_version` (or set it to `version`).

        Running sequences keep their tokens but lose their KV cache (computed by the old weights)
        and go back to the front of the queue, to be re-prefilled under the new weights.
        Returns the new version.
        """
        if state_dict is not None:
            self.model.load_state_dict(state_dict)
        self.policy_version = self.policy_version + 1 if version is None else version
        self._waiting.extendleft(reversed(self._live()))
        self._slots, self._kv = [], None
        if self._prefix is not None:
            self._prefix.clear()
        return self.policy_version

    def has_unfinished(self) -> bool:
        return bool(self._waiting) or any(s is not None for s in self._slots)

    @property
    def num_running(self) -> int:
        return len(self._live())

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    # ----------------------------------------------------------------- internals

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """Last-position logits [B, V] for input ids/positions [B, L] with mask [B, past + L]."""
        kwargs: dict[str, Any] = {self._cache_kwarg: cache, "use_cache": True}
        if self._logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, **kwargs)
        self.stats.forward_calls += 1
        return out.logits[:, -1, :]

    def _live(self) -> list[_Seq]:
        return [s for s in self._slots if s is not None]

    def _decode(self) -> None:
        """One token for every slot (all live: `_compact` ran first)."""
        assert self._kv is not None
        seqs = self._live()
        ids = torch.tensor([[s.token_ids[-1]] for s in seqs], device=self.device)
        pos = torch.tensor([[s.pos] for s in seqs], device=self.device)
        mask = self._kv.append_step()
        self.stats.decode_kv_columns += mask.numel()
        self.stats.decode_kv_padding_columns += int(mask.numel() - mask.sum())
        if self._lean is not None:
            logits = self._lean(ids, mask, pos, self._kv.cache)
            self.stats.forward_calls += 1
        else:
            logits = self._forward(ids, mask, pos, self._kv.cache)
        for s in seqs:
            s.pos += 1
        self._sample(seqs, logits)

    def _admit(self) -> list[GenerationResult]:
        """Prefill waiting requests into free slots; return those done after their first token.

        Each distinct context is prefilled once (and a fresh prompt is remembered in the prefix
        cache), so the samples of one group admitted now or later share a single prefill.
        """
        free = self.max_batch_size - self.num_running
        batch = [self._waiting.popleft() for _ in range(min(free, len(self._waiting)))]
        if not batch:
            return []
        keys = [tuple(s.context) for s in batch]
        entries: dict[tuple[int, ...], PrefixEntry | None] = {}
        todo: list[_Seq] = []
        for s, key in zip(batch, keys, strict=True):
            if key not in entries:
                entries[key] = self._prefix.get(key) if self._prefix is not None else None
                if entries[key] is None:
                    todo.append(s)
        self.stats.prefix_cache_hits += len(batch) - len(todo)
        for group in _prefill_groups(todo, self.max_prefill_tokens):
            contexts = [s.context for s in group]
            width = max(len(c) for c in contexts)
            ids = torch.zeros(len(group), width, dtype=torch.long)
            mask = torch.zeros(len(group), width, dtype=torch.long)
            for i, c in enumerate(contexts):
                ids[i, width - len(c) :] = torch.tensor(c)
                mask[i, width - len(c) :] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            pos = (mask.cumsum(-1) - 1).clamp_(min=0)
            cache = new_cache()
            logits = self._forward(ids, mask, pos, cache)
            real = sum(len(c) for c in contexts)
            self.stats.prefill_tokens += real
            self.stats.prefill_padding_tokens += ids.numel() - real
            prefilled = BatchKVCache(cache, mask)
            for i, (s, c) in enumerate(zip(group, contexts, strict=True)):
                entry = entry_from_row(prefilled, i, len(c), logits[i])
                entries[tuple(c)] = entry
                if self._prefix is not None and not s.token_ids:
                    self._prefix.put(tuple(c), entry)
        joined, logits = batch_from_entries([entries[k] for k in keys])  # type: ignore[misc]
        for s, key in zip(batch, keys, strict=True):
            s.pos = len(key)
        self._place(batch, joined)
        self._sample(batch, logits)
        self.stats.max_running = max(self.stats.max_running, self.num_running)
        return self._retire(only=set(map(id, batch)))

    def _place(self, group: list[_Seq], joined: BatchKVCache) -> None:
        """Put freshly prefilled rows into free slots (in place), the rest after the last slot."""
        if self._kv is None:
            self._kv, self._slots = joined, list(group)
            return
        dead = [i for i, s in enumerate(self._slots) if s is None][: len(group)]
        if dead:
            self._kv.fill(dead, joined, list(range(len(dead))))
            self.stats.reused_slots += len(dead)
            for slot, s in zip(dead, group, strict=False):
                self._slots[slot] = s
        if len(dead) < len(group):
            if dead:
                joined.select(torch.arange(len(dead), len(group), device=self.device))
            self._kv.extend(joined)
            self._slots.extend(group[len(dead) :])

    def _sample(self, seqs: Sequence[_Seq], logits: torch.Tensor) -> None:
        temperature, top_k, top_p = params_tensors([s.request.params for s in seqs], self.device)
        lp = process_logits(logits, temperature, top_k, top_p)
        tokens = sample_rows(lp, [s.generator for s in seqs])
        chosen = lp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).tolist()
        k = max(s.request.params.logprobs for s in seqs)
        top = [t.tolist() for t in top_logprobs(lp, k)] if k else None
        for i, (s, tok) in enumerate(zip(seqs, tokens.tolist(), strict=True)):
            s.token_ids.append(tok)
            s.logprobs.append(chosen[i])
            s.versions.append(self.policy_version)
            if top is not None and s.top_ids is not None and s.top_lps is not None:
                kk = s.request.params.logprobs
                pairs = [(t, v) for t, v in zip(top[0][i][:kk], top[1][i][:kk], strict=True) if v != float("-inf")]
                s.top_ids.append([t for t, _ in pairs])
                s.top_lps.append([v for _, v in pairs])
        self.stats.generated_tokens += len(seqs)

    def _retire(self, only: set[int] | None = None) -> list[GenerationResult]:
        """Free the slots of finished sequences (restricted to `only`, object ids, if given)."""
        finished = []
        for i, s in enumerate(self._slots):
            if s is None or (only is not None and id(s) not in only):
                continue
            verdict = s.stop.check(s.token_ids, s.budget)
            if verdict is not None:
                finished.append(self._result(s, *verdict))
                self._slots[i] = None
        return finished

    def _compact(self) -> None:
        """Remove free slots from the cache."""
        keep = [i for i, s in enumerate(self._slots) if s is not None]
        if len(keep) == len(self._slots):
            return
        if not keep:
            self._slots, self._kv = [], None
            return
        assert self._kv is not None
        self._kv.select(torch.tensor(keep, device=self.device))
        self._slots = [self._slots[i] for i in keep]

    def _result(self, s: _Seq, reason: Any, stop_reason: int | str | None) -> GenerationResult:
        r = s.request
        self._ids.discard(r.request_id)
        text = self.tokenizer.decode(s.token_ids, skip_special_tokens=True) if self.tokenizer else None
        return GenerationResult(
            request_id=r.request_id,
            prompt_token_ids=list(r.prompt_token_ids),
            token_ids=list(s.token_ids),
            logprobs=list(s.logprobs),
            policy_versions=list(s.versions),
            finish_reason=reason,
            group_id=r.group_id,
            top_token_ids=s.top_ids,
            top_logprobs=s.top_lps,
            stop_reason=stop_reason,
            text=text,
            rng_state=generator_state(s.generator) if reason == "abort" else None,
        )


@contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Run `model` in eval mode inside the block and restore its previous mode after."""
    training = model.training
    if training:
        model.eval()
    try:
        yield
    finally:
        if training:
            model.train()


def _prefill_groups(seqs: list[_Seq], max_tokens: int) -> list[list[_Seq]]:
    """Split `seqs` (sorted by context length) into groups whose padded size fits `max_tokens`
    and whose padding is at most a quarter of the group's padded tokens."""
    groups: list[list[_Seq]] = []
    for s in sorted(seqs, key=lambda s: len(s.request.prompt_token_ids) + len(s.token_ids)):
        n = len(s.request.prompt_token_ids) + len(s.token_ids)
        if groups:
            g = groups[-1]
            real = sum(len(x.request.prompt_token_ids) + len(x.token_ids) for x in g) + n
            padded = n * (len(g) + 1)
            if padded <= max_tokens and real >= 0.75 * padded:
                g.append(s)
                continue
        groups.append([s])
    return groups


def _context_limit(config: Any) -> int:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError("cannot tell the model's context length from its config; pass max_context=")


def _eos_ids(model: Any, tokenizer: Any | None) -> tuple[int, ...]:
    ids: set[int] = set()
    sources = [getattr(tokenizer, "eos_token_id", None), getattr(getattr(model, "generation_config", None), "eos_token_id", None)]
    for src in sources:
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, list | tuple):
            ids.update(int(x) for x in src)
    return tuple(sorted(ids))
