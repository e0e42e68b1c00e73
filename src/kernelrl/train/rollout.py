"""Rollouts: the generation engine samples while the gym's pool already judges finished samples.

`EvalOnFinish` wraps an `Engine` as a `StepGenerator`: every sample that finishes inside a step is
turned into a candidate and submitted to the `EvalPool` at once (a future), so compiling and
checking overlaps the decoding of the samples still running. `Rollout` drives a `CoprisScheduler`
(``early_termination=False`` = sync, ``True`` = CoPRIS partial rollouts) over a deterministic
prompt stream with a cursor (saved in checkpoints), and runs extra turns for multi-turn episodes
(the gym's verdict is appended as the next user turn).

With tools (``rl.tools``) a turn may end in a plain-text tool call (`kernelrl.agent.episode_protocol`): the
rollout runs it through the gym (`ToolExecutor`), appends the output tokens to the response and
continues the same turn; those environment tokens are False in the sample's `loss_mask`.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import time
import zlib
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from kernelrl.agent.tools import ToolExecutor
from kernelrl.evaluate import EvalPool, EvalResult, VerdictCache
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
    """One turn of one episode, with everything the update needs.

    With tool calls the response holds the policy's tokens and the tools' output tokens in order;
    `loss_mask` (per response token, True: the policy's own) keeps the latter out of every loss and
    statistic (their `rollout_logprobs` are 0 placeholders). None: every token is the policy's.
    """

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
    request_id: str = ""  # the engine request of the turn's first segment (an opaque key)
    gen_s: float = 0.0  # decoding time charged to this sample outside the first batch
    tool_calls: int = 0
    loss_mask: list[bool] | None = None

    def model_mask(self) -> list[bool]:
        """Per response token: True where the policy wrote it."""
        return list(self.loss_mask) if self.loss_mask is not None else [True] * len(self.response_ids)

    def extend(self, ids: list[int], text: str, *, logprobs: list[float] | None = None,
               versions: list[int] | None = None) -> None:
        """Append a segment: the policy's tokens (with `logprobs`), or the environment's (without)."""
        mask = self.model_mask()
        own = logprobs is not None
        self.response_ids += ids
        self.rollout_logprobs += list(logprobs) if own else [0.0] * len(ids)
        last = self.versions[-1] if self.versions else 0
        self.versions += list(versions) if versions is not None else [last] * len(ids)
        self.loss_mask = mask + [own] * len(ids)
        self.text += text


class EvalCache(VerdictCache):
    """`VerdictCache` over a task family's items and answer texts: identical answers are judged once per run.
    An answer without code is not sent to the gym; its verdict is `no_code_result` (reward 0)."""

    def __init__(self, pool: EvalPool, family: TaskFamily) -> None:
        super().__init__(pool)
        self.family = family
        self._no_code: dict[str, cf.Future[EvalResult]] = {}
        self._prefetched: set[str] = set()

    def prefetch(self, item: Hashable) -> None:
        """Have the pool time `item`'s reference now, while its answers are still being generated."""
        task = self.family.task(item)
        if task.id not in self._prefetched and hasattr(self.pool, "prefetch"):
            self._prefetched.add(task.id)
            self.pool.prefetch(task, self.family.backend)

    def submit(self, item: Hashable, answer: str) -> cf.Future[EvalResult]:
        task = self.family.task(item)
        cand = self.family.candidate(item, answer)
        if cand is not None:
            return self.judge(task, cand)
        fut = self._no_code.get(task.id)
        if fut is None:
            fut = self._no_code[task.id] = cf.Future()
            fut.set_result(no_code_result(task, self.family.backend))
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
                 cursor: int = 0, family: TaskFamily | None = None,
                 on_item: Callable[[Hashable], None] | None = None) -> None:
        """`on_item`: called with each group's item as it is handed out (the gym prefetches its reference)."""
        self.items, self.tok, self.params, self.seed, self.cursor = items, tok, params, seed, cursor
        self.on_item = on_item
        self.family = family or TinyFamily([], [])
        self.groups: dict[str, int] = {}  # group id handed to the scheduler -> its stream position

    def item_of(self, group_id: str | None) -> Hashable:
        """The item of a group this stream handed out."""
        return self.item_at(self.groups[group_id or ""])

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
            self.groups[f"{k}"] = k
            if self.on_item is not None:
                self.on_item(item)
            yield PromptGroup(f"{k}", tuple(self.family.prompt_ids(self.tok, item)), self.params.replace(seed=seed))


class Rollout:
    """Produces one step's samples: prompt groups -> engine -> pool futures -> (more turns)."""

    def __init__(self, engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable], *,
                 group_size: int, prompts_per_step: int, params: SamplingParams, mode: str, concurrency: int,
                 turns: int, seed: int, cursor: int = 0, stop_at_first_correct: bool = True,
                 tools: bool = False, max_tool_calls: int = 2) -> None:
        self.tok, self.cache, self.turns = tok, cache, turns
        self.stop_at_first_correct = stop_at_first_correct
        self.family = cache.family
        self.protocol = self.family.protocol
        self.tools, self.max_tool_calls = tools, max_tool_calls
        if tools:  # generation pauses at a tool call
            params = params.replace(stop_strings=(*params.stop_strings, self.protocol.tool_stop))
        self.params = params
        self._turn_of: dict[str, str] = {}  # continuation request id -> the turn's first request id
        self._prefix: dict[str, str] = {}  # continuation request id -> the turn's text before it
        self._executors: dict[str, ToolExecutor] = {}
        self._tool_outputs: dict[tuple[str, str, str], str] = {}
        self.stream = PromptStream(items, tok, params, seed, cursor, self.family, on_item=cache.prefetch)
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
                "groups": dict(self.stream.groups),
                "results": {rid: self._futures[rid].result().to_dict() for rid in waiting if rid in self._futures}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.cursor = int(state["cursor"])
        self.stream.groups = {str(k): int(v) for k, v in state.get("groups", {}).items()}
        self.scheduler.load_state_dict(state["scheduler"])
        for rid, result in state["results"].items():
            future: cf.Future[EvalResult] = cf.Future()
            future.set_result(EvalResult.from_dict(result))
            self._futures[rid] = future

    def _submit(self, res: GenerationResult) -> None:
        """Send a finished turn to the gym at once; a response ending in a tool call waits for `_run_tools`."""
        rid = self._turn_of.get(res.request_id, res.request_id)
        item = self._item_of[rid] if rid in self._item_of else self.stream.item_of(res.group_id)
        text = self._prefix.get(res.request_id, "") + self._text(res)
        if self.tools and self.protocol.tool_call(text) is not None:
            return
        self._futures[rid] = self.cache.submit(item, text)

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
                item = self.stream.item_of(res.group_id)
                samples.append(Sample(g, len(samples), 0, item, list(res.prompt_token_ids), list(res.token_ids),
                                      list(res.logprobs), list(res.policy_versions), self._text(res),
                                      res.finish_reason, request_id=res.request_id))
            self.stream.groups.pop(group[0].group_id or "", None)
        t_tools = self._run_tools(samples)
        t1 = time.perf_counter()
        for s in samples:
            s.result = self._futures.pop(s.request_id).result()
            self._item_of.pop(s.request_id, None)
        t_wait = time.perf_counter() - t1
        current = samples
        for turn in range(1, self.turns):
            go_on = [s for s in current if not (self.stop_at_first_correct and s.result and s.result.correct)]
            current = self._next_turn(go_on, turn)
            samples += current
            if not current:
                break
        self.last_stats = {"time/generate": t_gen + sum(s.gen_s for s in samples),
                           "time/evaluate_wait": t_wait, "time/tools": t_tools,
                           "rollout/tool_calls": float(sum(s.tool_calls for s in samples)), "rollout/stale_fraction": batch.stats.stale_fraction,
                           "rollout/aborted": float(batch.stats.aborted), "rollout/resumed": float(batch.stats.resumed)}
        return samples

    def _next_turn(self, unsolved: list[Sample], turn: int) -> list[Sample]:
        reqs, fits = [], []
        for s in unsolved:
            ctx = s.prompt_ids + s.response_ids + self.family.next_turn_ids(self.tok, s.result, s.response_ids)
            if len(ctx) >= self.engine.max_context:  # no room left for another answer: the episode ends here
                continue
            fits.append(s)
            seed = zlib.crc32(f"{self.stream.seed}:{s.request_id}:{turn}".encode())
            rid = f"{s.request_id}#t{turn}"  # unique and stable (it seeds nothing else); never parsed
            self._item_of[rid] = s.item
            reqs.append(GenerationRequest(tuple(ctx), self.params.replace(seed=seed), rid, f"{rid}"))
        results, gen_s = self._generate(reqs)
        out = []
        for s, r in zip(fits, reqs, strict=True):
            res = results[r.request_id]
            out.append(Sample(s.group, s.episode, turn, s.item, list(r.prompt_token_ids), list(res.token_ids),
                              list(res.logprobs), list(res.policy_versions), self._text(res), res.finish_reason,
                              request_id=r.request_id, gen_s=gen_s / max(1, len(reqs))))
        self._run_tools(out)
        for nxt in out:
            nxt.result = self._futures.pop(nxt.request_id).result()
            self._item_of.pop(nxt.request_id, None)
        return out

    def _generate(self, reqs: list[GenerationRequest]) -> tuple[dict[str, GenerationResult], float]:
        """Run `reqs` to completion on the (otherwise idle) engine; finished ones go to the gym as they land."""
        t0 = time.perf_counter()
        for r in reqs:
            self.wrapped.add(r)
        results: dict[str, GenerationResult] = {}
        while self.engine.has_unfinished():
            for res in self.wrapped.step():
                results[res.request_id] = res
        return results, time.perf_counter() - t0

    def _tool_output(self, item: Hashable, name: str, text: str) -> str:
        """The output text of the call ending `text`, run by the gym (memoised per task, tool and candidate)."""
        task = self.family.task(item)
        key = (task.id, name, self.protocol.answer(text))
        if key not in self._tool_outputs:
            if task.id not in self._executors:
                self._executors[task.id] = ToolExecutor(self.cache.pool, task, self.family.backend)
            self._tool_outputs[key] = self.protocol.run_tool(self._executors[task.id], name, text)[0]
        return self._tool_outputs[key]

    def _run_tools(self, samples: list[Sample]) -> float:
        """Continue every turn that ended in a tool call: run the tool, append its output (environment
        tokens), generate on in the same turn; a turn out of calls, new-token budget or context is judged
        as it stands. Returns the seconds spent (tools and generation)."""
        t0 = time.perf_counter()
        pending = [s for s in samples if s.request_id not in self._futures]
        while pending:
            reqs, owners = [], []
            for s in pending:
                name = self.protocol.tool_call(s.text)
                budget = self.params.max_new_tokens - sum(s.model_mask())
                out_text, out_ids = "", []
                if name is not None and s.tool_calls < self.max_tool_calls and budget > 0:
                    out_text = self._tool_output(s.item, name, s.text)
                    out_ids = self.tok.encode(out_text, add_special_tokens=False)
                if not out_ids or len(s.prompt_ids) + len(s.response_ids) + len(out_ids) >= self.engine.max_context:
                    self._futures[s.request_id] = self.cache.submit(s.item, s.text)
                    continue
                s.tool_calls += 1
                s.extend(out_ids, out_text)
                self._item_of[s.request_id] = s.item
                rid = f"{s.request_id}~tool{s.tool_calls}"
                self._turn_of[rid], self._prefix[rid] = s.request_id, s.text
                seed = zlib.crc32(f"{self.stream.seed}:{rid}".encode())
                params = self.params.replace(seed=seed, max_new_tokens=budget)
                reqs.append(GenerationRequest(tuple(s.prompt_ids + s.response_ids), params, rid, rid))
                owners.append(s)
            results, _ = self._generate(reqs)
            for s, r in zip(owners, reqs, strict=True):
                res = results[r.request_id]
                s.extend(list(res.token_ids), self._text(res), logprobs=list(res.logprobs),
                         versions=list(res.policy_versions))
                s.finish_reason = res.finish_reason
                self._turn_of.pop(r.request_id)
                self._prefix.pop(r.request_id)
            pending = [s for s in owners if s.request_id not in self._futures]
        return time.perf_counter() - t0


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
    index = {r.request_id: k // samples for k, r in enumerate(reqs)}  # request -> its item
    out: list[list[str]] = [[] for _ in items]
    for r in engine.generate(reqs):
        out[index[r.request_id]].append(tok.decode(r.token_ids, skip_special_tokens=True))
    return out
