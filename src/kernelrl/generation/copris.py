"""CoPRIS rollout scheduling: concurrency-controlled partial rollouts.

Qu et al., "CoPRIS: Efficient and Stable Reinforcement Learning via Concurrency-Controlled Partial
Rollout with Importance Sampling", arXiv:2511.05589 (2025). A fixed number of samples are in
flight; whenever one finishes, the next waiting one starts. Once enough *complete* groups (all n
samples of a prompt) are collected for a training batch, the samples still in flight are stopped
and kept, with their tokens, log-probs and per-token policy versions, in a buffer; the next batch
resumes them first with what is left of their token budget. Each token keeps the log-prob and
the policy version that produced it; stitching old and current log-probs into importance ratios
is `kernelrl.rl`'s job. Synchronous rollout is the same scheduler with `early_termination=False`:
exactly one batch of groups is generated to completion, nothing is carried over.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kernelrl.generation.interfaces import StepGenerator
from kernelrl.generation.records import GenerationRequest, GenerationResult, SamplingParams


@dataclass(frozen=True)
class PromptGroup:
    """A prompt to sample `group_size` times; `params` is shared or one per sample."""

    group_id: str
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams | tuple[SamplingParams, ...] = field(default_factory=SamplingParams)


def expand_group(group: PromptGroup, n: int) -> list[GenerationRequest]:
    """The n requests of a group: ids "<group_id>/<i>"; a seeded group gets distinct per-sample seeds."""
    params = group.params if isinstance(group.params, tuple) else (group.params,) * n
    if len(params) != n:
        raise ValueError(f"group {group.group_id!r}: {len(params)} SamplingParams for a group of {n}")
    out = []
    for i, p in enumerate(params):
        if p.seed is not None:
            p = p.replace(seed=zlib.crc32(f"{p.seed}:{group.group_id}:{i}".encode()))
        out.append(GenerationRequest(group.prompt_token_ids, p, f"{group.group_id}/{i}", group.group_id))
    return out


@dataclass(frozen=True)
class RolloutStats:
    """What one `next_batch` call did.

    generated_tokens: tokens sampled during the call (in returned groups or left in the buffer).
    aborted: samples stopped early and buffered; resumed: buffered samples restarted.
    stale_tokens / batch_tokens: tokens of the returned groups produced under an older policy
    version than the current one, and all their tokens. tokens_by_version: version -> count.
    """

    policy_version: int
    wall_s: float
    generated_tokens: int
    aborted: int
    resumed: int
    batch_tokens: int
    stale_tokens: int
    tokens_by_version: dict[int, int]

    @property
    def stale_fraction(self) -> float:
        return self.stale_tokens / max(1, self.batch_tokens)


@dataclass
class RolloutGroups:
    """Complete groups for one training batch; groups[g][i] is sample i of group g."""

    groups: list[list[GenerationResult]]
    stats: RolloutStats


class CoprisScheduler:
    """Feeds a `StepGenerator` (e.g. `Engine`) from a stream of prompt groups.

    group_size: samples per prompt (n). groups_per_batch: complete groups per `next_batch`.
    concurrency: samples in flight at once (the engine must fit them in one batch).
    early_termination: True = CoPRIS; False = synchronous rollout of one batch at a time.
    """

    def __init__(
        self,
        engine: StepGenerator,
        prompts: Iterable[PromptGroup],
        *,
        group_size: int,
        groups_per_batch: int,
        concurrency: int,
        early_termination: bool = True,
    ) -> None:
        for name, value in (("group_size", group_size), ("groups_per_batch", groups_per_batch),
                            ("concurrency", concurrency)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if getattr(engine, "max_batch_size", concurrency) < concurrency:
            raise ValueError(
                f"concurrency {concurrency} exceeds the engine's max_batch_size {engine.max_batch_size}"  # type: ignore[attr-defined]
            )
        if engine.has_unfinished():
            raise ValueError("the engine must be idle when the scheduler takes it over")
        self.engine = engine
        self.group_size = group_size
        self.groups_per_batch = groups_per_batch
        self.concurrency = concurrency
        self.early_termination = early_termination
        self._source: Iterator[PromptGroup] = iter(prompts)
        self._exhausted = False
        self._queue: deque[tuple[GenerationRequest, GenerationResult | None]] = deque()
        self._inflight: dict[str, tuple[GenerationRequest, int]] = {}  # id -> (request, tokens at start)
        self._index: dict[str, int] = {}  # request id -> sample index in its group
        self._done: dict[str, list[GenerationResult]] = {}
        self._ready: deque[list[GenerationResult]] = deque()

    @property
    def buffered(self) -> list[GenerationResult]:
        """Partial samples waiting to resume (oldest first)."""
        return [p for _, p in self._queue if p is not None]

    @property
    def waiting_for_group(self) -> list[GenerationResult]:
        """Finished samples whose group still has samples running or buffered."""
        return [r for done in self._done.values() for r in done]

    @property
    def exhausted(self) -> bool:
        """No prompts left, nothing buffered, nothing in flight, no complete group waiting."""
        return self._exhausted and not (self._queue or self._inflight or self._ready)

    def next_batch(self) -> RolloutGroups:
        """Generate until `groups_per_batch` complete groups exist (fewer only when prompts run out).

        Groups come in the order they completed, samples within a group by index. With early
        termination, samples still running are aborted into the buffer before this returns, so
        the engine is idle and the caller may update the weights.
        """
        start = time.perf_counter()
        generated = aborted = 0
        resumed = sum(1 for _, p in self._queue if p is not None and p.token_ids)
        if not self.early_termination:
            for _ in range(self.groups_per_batch - len(self._ready)):
                if not self._pull():
                    break
        while len(self._ready) < self.groups_per_batch:
            self._fill()
            if not self._inflight:
                break
            for res in self.engine.step():
                generated += self._finish(res)
        if self._inflight:
            partials = self.engine.abort_all()
            for p in partials:
                generated += self._produced(p)
                aborted += 1 if p.token_ids else 0
            # Resume first, in the order they were started.
            self._queue.extendleft(reversed([(self._inflight[p.request_id][0], p) for p in partials]))
            self._inflight.clear()
        n = min(self.groups_per_batch, len(self._ready))
        groups = [self._ready.popleft() for _ in range(n)]
        version = self.engine.policy_version
        by_version = Counter(v for g in groups for r in g for v in r.policy_versions)
        batch_tokens = sum(by_version.values())
        stale = sum(c for v, c in by_version.items() if v < version)
        stats = RolloutStats(version, time.perf_counter() - start, generated, aborted, resumed,
                             batch_tokens, stale, dict(sorted(by_version.items())))
        return RolloutGroups(groups, stats)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to continue exactly (JSON-serialisable); call between batches, when
        nothing is in flight: buffered partials (tokens, log-probs, versions, sampler state), samples
        that finished while their group is incomplete, complete groups not yet handed out."""
        if self._inflight:
            raise RuntimeError("state_dict() between batches only: samples are still in flight")
        return {
            "queue": [[req.to_dict(), None if p is None else p.to_dict()] for req, p in self._queue],
            "index": dict(self._index),
            "done": {gid: [r.to_dict() for r in done] for gid, done in self._done.items()},
            "ready": [[r.to_dict() for r in group] for group in self._ready],
            "exhausted": self._exhausted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` into an idle scheduler (the prompt stream is restored by its owner)."""
        if self._inflight or self.engine.has_unfinished():
            raise RuntimeError("load_state_dict() needs an idle scheduler and engine")
        self._queue = deque(
            (GenerationRequest.from_dict(req), None if p is None else GenerationResult.from_dict(p))
            for req, p in state["queue"]
        )
        self._index = {k: int(v) for k, v in state["index"].items()}
        self._done = {gid: [GenerationResult.from_dict(r) for r in done] for gid, done in state["done"].items()}
        self._ready = deque([GenerationResult.from_dict(r) for r in group] for group in state["ready"])
        self._exhausted = bool(state["exhausted"])

    # ----------------------------------------------------------------- internals

    def _pull(self) -> bool:
        """Queue the samples of the next prompt group; False when the prompts ran out."""
        if self._exhausted:
            return False
        group = next(self._source, None)
        if group is None:
            self._exhausted = True
            return False
        for i, req in enumerate(expand_group(group, self.group_size)):
            self._index[req.request_id] = i
            self._queue.append((req, None))
        return True

    def _fill(self) -> None:
        """Start waiting samples (buffered partials first) until `concurrency` are in flight."""
        while len(self._inflight) < self.concurrency:
            if not self._queue and not (self.early_termination and self._pull()):
                return
            req, partial = self._queue.popleft()
            self.engine.add(req, resume_from=partial)
            self._inflight[req.request_id] = (req, len(partial.token_ids) if partial else 0)

    def _produced(self, res: GenerationResult) -> int:
        return len(res.token_ids) - self._inflight[res.request_id][1]

    def _finish(self, res: GenerationResult) -> int:
        produced = self._produced(res)
        del self._inflight[res.request_id]
        gid = res.group_id or res.request_id
        done = self._done.setdefault(gid, [])
        done.append(res)
        if len(done) == self.group_size:
            done.sort(key=lambda r: self._index[r.request_id])
            for r in done:
                del self._index[r.request_id]
            self._ready.append(done)
            del self._done[gid]
        return produced

