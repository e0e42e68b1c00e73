"""Rollouts: the generation engine samples while the gym's pool already judges finished samples.

`EvalOnFinish` wraps an `Engine` as a `StepGenerator`: every sample that finishes inside a step is
turned into a candidate and submitted to the `EvalPool` at once (a future), so compiling and
checking overlaps the decoding of the samples still running. `Rollout` drives a `CoprisScheduler`
(``early_termination=False`` = sync, ``True`` = CoPRIS partial rollouts) over a deterministic
prompt stream with a cursor (saved in checkpoints), and runs extra turns for multi-turn episodes
(the gym's verdict is appended as the next user turn).
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import time
import zlib
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kernelrl.evaluate import EvalPool, EvalResult
from kernelrl.generation import (
    CoprisScheduler,
    Engine,
    GenerationRequest,
    GenerationResult,
    PromptGroup,
    SamplingParams,
)
from kernelrl.train.task_family import TaskFamily, TinyFamily, no_code_result


@dataclass
class Sample:
    """One turn of one episode, with everything the update needs."""

    group: int  # prompt group within the step
    episode: int
    turn: int
    item: Hashable  # the family's task item (a chain, a task id)
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]
    versions: list[int]
    text: str
    finish_reason: str
    result: EvalResult | None = None
    reward: float = 0.0
    extras: dict[str, Any] = field(default_factory=dict)


class EvalCache:
    """Pool futures keyed by (task id, candidate source): identical answers are judged once per run.
    An answer without code is not sent to the gym; its verdict is `no_code_result` (reward 0)."""

    def __init__(self, pool: EvalPool, family: TaskFamily) -> None:
        self.pool, self.family = pool, family
        self._futures: dict[tuple[str, str | None], cf.Future[EvalResult]] = {}
        self.submitted = self.hits = 0

    def submit(self, item: Hashable, answer: str) -> cf.Future[EvalResult]:
        task = self.family.task(item)
        cand = self.family.candidate(item, answer)
        key = (task.id, cand.source if cand is not None else None)
        fut = self._futures.get(key)
        if fut is None:
            if cand is None:
                fut = cf.Future()
                fut.set_result(no_code_result(task, getattr(self.family, "backend", "cpu")))
            else:
                fut = self.pool.submit(task, cand)
                self.submitted += 1
            self._futures[key] = fut
        else:
            self.hits += 1
        return fut


class EvalOnFinish:
    """`StepGenerator` over an `Engine` that submits each finished sample to the gym right away."""

    def __init__(self, engine: Engine, on_finish: Callable[[GenerationResult], None]) -> None:
        self.engine, self.on_finish = engine, on_finish

    def step(self) -> list[GenerationResult]:
        done = self.engine.step()
        for res in done:
            self.on_finish(res)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class PromptStream:
    """Endless prompt groups over the train items: a fresh seeded permutation per epoch; `cursor`
    counts groups handed out, so a resumed run continues the same stream."""

    def __init__(self, items: list[Hashable], tok: Any, params: SamplingParams, seed: int,
                 cursor: int = 0, family: TaskFamily | None = None) -> None:
        self.items, self.tok, self.params, self.seed, self.cursor = items, tok, params, seed, cursor
        self.family = family or TinyFamily([], [])

    def item_at(self, k: int) -> Hashable:
        epoch, i = divmod(k, len(self.items))
        order = list(range(len(self.items)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return self.items[order[i]]

    def __iter__(self) -> Iterator[PromptGroup]:
        while True:
            k = self.cursor
            self.cursor += 1
            item = self.item_at(k)
            seed = zlib.crc32(f"{self.seed}:{k}".encode())
            yield PromptGroup(f"{k}", tuple(self.family.prompt_ids(self.tok, item)), self.params.replace(seed=seed))


def feedback_suffix(result: EvalResult | None) -> str:
    """The tiny family's next user turn (the gym's status); other families: `TaskFamily.feedback_text`."""
    return TinyFamily([], []).feedback_text(result)


class Rollout:
    """Produces one step's samples: prompt groups -> engine -> pool futures -> (more turns)."""

    def __init__(self, engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable], *,
                 group_size: int, prompts_per_step: int, params: SamplingParams, mode: str, concurrency: int,
                 turns: int, seed: int, cursor: int = 0, stop_at_first_correct: bool = True) -> None:
        self.tok, self.cache, self.turns, self.params = tok, cache, turns, params
        self.stop_at_first_correct = stop_at_first_correct
        self.family = cache.family
        self.stream = PromptStream(items, tok, params, seed, cursor, self.family)
        self._futures: dict[str, cf.Future[EvalResult]] = {}
        self._item_of: dict[str, Hashable] = {}
        self.wrapped = EvalOnFinish(engine, self._submit)
        self.engine = engine
        self.scheduler = CoprisScheduler(self.wrapped, self.stream, group_size=group_size,
                                         groups_per_batch=prompts_per_step,
                                         concurrency=concurrency if mode == "copris" else group_size * prompts_per_step,
                                         early_termination=mode == "copris")
        self.last_stats: dict[str, float] = {}

    @property
    def cursor(self) -> int:
        """Groups handed out so far (for sync rollouts, exactly those trained on)."""
        return self.stream.cursor

    def state_dict(self) -> dict[str, Any]:
        """Prompt cursor, the scheduler's carried-over samples and the verdicts of samples that finished
        while their group is still incomplete (waited for here), for an exact resume."""
        waiting = [r.request_id for r in self.scheduler.waiting_for_group]
        return {"cursor": self.stream.cursor, "scheduler": self.scheduler.state_dict(),
                "results": {rid: self._futures[rid].result().to_dict() for rid in waiting}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.cursor = int(state["cursor"])
        self.scheduler.load_state_dict(state["scheduler"])
        for rid, result in state["results"].items():
            future: cf.Future[EvalResult] = cf.Future()
            future.set_result(EvalResult.from_dict(result))
            self._futures[rid] = future

    def _submit(self, res: GenerationResult) -> None:
        item = self._item_of.get(res.request_id) or self.stream.item_at(int((res.group_id or "0").split("#")[0]))
        self._futures[res.request_id] = self.cache.submit(item, self._text(res))

    def _text(self, res: GenerationResult) -> str:
        return self.tok.decode(res.token_ids, skip_special_tokens=True)

    def collect(self) -> list[Sample]:
        """Generate one batch, wait for its verdicts, then run the remaining turns: for unsolved episodes
        only (`stop_at_first_correct`), or for every episode up to the turn limit (KernelGYM: a correct
        kernel gets its speedup as feedback and is refined further)."""
        t0 = time.perf_counter()
        batch = self.scheduler.next_batch()
        t_gen = time.perf_counter() - t0
        samples: list[Sample] = []
        for g, group in enumerate(batch.groups):
            for res in group:
                item = self.stream.item_at(int(res.group_id or "0"))
                samples.append(Sample(g, len(samples), 0, item, list(res.prompt_token_ids), list(res.token_ids),
                                      list(res.logprobs), list(res.policy_versions), self._text(res),
                                      res.finish_reason))
                samples[-1].extras["request_id"] = res.request_id
        t1 = time.perf_counter()
        for s in samples:
            s.result = self._futures.pop(s.extras["request_id"]).result()
        t_wait = time.perf_counter() - t1
        current = samples
        for turn in range(1, self.turns):
            go_on = [s for s in current if not (self.stop_at_first_correct and s.result and s.result.correct)]
            current = self._next_turn(go_on, turn)
            samples += current
            if not current:
                break
        self.last_stats = {"time/generate": t_gen + sum(s.extras.get("gen_s", 0.0) for s in samples),
                           "time/evaluate_wait": t_wait, "rollout/stale_fraction": batch.stats.stale_fraction,
                           "rollout/aborted": float(batch.stats.aborted), "rollout/resumed": float(batch.stats.resumed)}
        return samples

    def _next_turn(self, unsolved: list[Sample], turn: int) -> list[Sample]:
        reqs, fits = [], []
        for s in unsolved:
            ctx = s.prompt_ids + s.response_ids + self.family.next_turn_ids(self.tok, s.result, s.response_ids)
            if len(ctx) >= self.engine.max_context:  # no room left for another answer: the episode ends here
                continue
            fits.append(s)
            seed = zlib.crc32(f"{self.stream.seed}:{s.extras['request_id']}:{turn}".encode())
            rid = f"{s.extras['request_id']}#t{turn}"
            self._item_of[rid] = s.item
            reqs.append(GenerationRequest(tuple(ctx), self.params.replace(seed=seed), rid, f"{rid}"))
        t0 = time.perf_counter()
        for r in reqs:
            self.wrapped.add(r)
        results: dict[str, GenerationResult] = {}
        while self.engine.has_unfinished():
            for res in self.wrapped.step():
                results[res.request_id] = res
        gen_s = time.perf_counter() - t0
        out = []
        for s, r in zip(fits, reqs, strict=True):
            res = results[r.request_id]
            nxt = Sample(s.group, s.episode, turn, s.item, list(r.prompt_token_ids), list(res.token_ids),
                         list(res.logprobs), list(res.policy_versions), self._text(res), res.finish_reason)
            nxt.extras = {"request_id": r.request_id, "gen_s": gen_s / max(1, len(reqs))}
            nxt.result = self._futures.pop(r.request_id).result()
            self._item_of.pop(r.request_id, None)
            out.append(nxt)
        return out


def collect_episodes(engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable], *, group_size: int, turns: int,
                     max_new_tokens: int, seed: int, stop_at_first_correct: bool,
                     temperature: float = 1.0) -> list[Sample]:
    """One batch of (multi-turn) episodes over `items`, each item once with `group_size` episodes, judged
    by the gym (`Rollout` outside a trainer: RFT's trajectories, probes)."""
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    rollout = Rollout(engine, tok, cache, items, group_size=group_size, prompts_per_step=len(items), params=params,
                      mode="sync", concurrency=group_size * len(items), turns=turns, seed=seed,
                      stop_at_first_correct=stop_at_first_correct)
    return rollout.collect()


def generate_answers(engine: Engine, tok: Any, items: list[Hashable], *, samples: int, max_new_tokens: int,
                     seed: int, family: TaskFamily | None = None) -> list[list[str]]:
    """Answers per item: greedy when `samples` is 1, else `samples` draws at temperature 1."""
    family = family or TinyFamily([], [])
    params = SamplingParams(temperature=0.0 if samples == 1 else 1.0, max_new_tokens=max_new_tokens, seed=seed)
    reqs = [GenerationRequest(tuple(family.prompt_ids(tok, c)), params.replace(seed=seed + 7919 * i + j),
                              f"h{i}/{j}") for i, c in enumerate(items) for j in range(samples)]
    res = engine.generate(reqs)
    out: list[list[str]] = [[] for _ in items]
    for r in res:
        out[int(r.request_id[1:].split("/")[0])].append(tok.decode(r.token_ids, skip_special_tokens=True))
    return out
