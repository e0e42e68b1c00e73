"""Rollouts: the generation engine samples while the gym's pool already judges finished samples.

`Rollout` drives a `CoprisScheduler` (``early_termination=False`` = sync, ``True`` = CoPRIS partial
rollouts) over a deterministic prompt stream with a cursor (saved in checkpoints) and runs the episode
loop (`kernelrl.agent.episode_loop`, the one bench runs too) through `EngineDriver`: every first-turn
segment that finishes inside an engine step lands in the loop at once (`Rollout.land` ->
`episode_loop.land` -> `EngineDriver.submit`, the gym submission), so compiling and checking overlaps the
decoding of the samples still running; then tool calls, verdicts and further turns (the gym's verdict is
appended as the next user turn). `judge_answers` runs single-turn episodes (held-out evaluation, RFT).

With tools (``rl.tools``) a turn may end in a plain-text tool call (`kernelrl.agent.episode_protocol`): the
loop runs it through the gym (`ToolExecutor`), appends the output tokens to the response and continues
the same turn; those environment tokens are False in the sample's `loss_mask`.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import time
import zlib
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from kernelrl.agent.episode_loop import EpisodeRules, land, run_episodes
from kernelrl.agent.episode_protocol import Verdict
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
from kernelrl.train.task_family import TaskFamily, TinyFamily


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
    An answer without code is not sent to the gym: its verdict is None (reward 0), as everywhere."""

    def __init__(self, pool: EvalPool, family: TaskFamily) -> None:
        super().__init__(pool)
        self.family = family
        self._prefetched: set[str] = set()

    def prefetch(self, item: Hashable) -> None:
        """Have the pool time `item`'s reference now, while its answers are still being generated."""
        task = self.family.task(item)
        if task.id not in self._prefetched and hasattr(self.pool, "prefetch"):
            self._prefetched.add(task.id)
            self.pool.prefetch(task, self.family.backend)

    def submit(self, item: Hashable, answer: str) -> cf.Future[Verdict]:
        """The future verdict of `answer` (already resolved to None when it holds no code)."""
        cand = self.family.candidate(item, answer)
        if cand is not None:
            return cast("cf.Future[Verdict]", self.judge(self.family.task(item), cand))
        fut: cf.Future[Verdict] = cf.Future()
        fut.set_result(None)
        return fut


@dataclass
class Episode:
    """One episode inside the loop: the `Sample` of the turn being written and the request that continues it."""

    sample: Sample
    request: GenerationRequest | None = None
    continues: bool = False  # the request continues the turn after a tool output (else it opens the turn)
    stop_reason: str = ""


class EngineDriver:
    """The episode loop's steps at the token level (`agent.episode_loop.TurnDriver`): the engine generates
    many episodes' segments in one batch, each lands as it finishes and its answer goes to the gym at
    once (`submit`, through the `EvalCache`), plain-text tool calls run through `ToolExecutor`, the next
    turn appends the family's feedback tokens. `samples` lists every turn opened, in order."""

    def __init__(self, engine: Engine, tok: Any, cache: EvalCache, params: SamplingParams, seed: int, *,
                 tools: bool = False, max_tool_calls: int = 0) -> None:
        self.engine, self.tok, self.cache, self.params, self.seed = engine, tok, cache, params, seed
        self.family = cache.family
        self.protocol = self.family.protocol
        self.tools, self.max_tool_calls = tools, max_tool_calls
        self.futures: dict[str, cf.Future[Verdict]] = {}  # turn's request id -> its verdict
        self.samples: list[Sample] = []
        self.wait_s = [0.0]  # per turn: seconds spent waiting for verdicts
        self.tools_s = 0.0
        self._executors: dict[str, ToolExecutor] = {}
        self._tool_outputs: dict[tuple[str, str, str], str] = {}

    def text(self, res: GenerationResult) -> str:
        return str(self.tok.decode(res.token_ids, skip_special_tokens=True))

    def first_turn(self, res: GenerationResult, item: Hashable, group: int = -1, episode: int = -1) -> Episode:
        """The episode of a first-turn segment generated outside the loop (the scheduler's)."""
        return Episode(Sample(group, episode, 0, item, list(res.prompt_token_ids), list(res.token_ids),
                              list(res.logprobs), list(res.policy_versions), self.text(res), res.finish_reason,
                              request_id=res.request_id))

    # ---------------------------------------------------------------- TurnDriver

    def generate(self, episodes: list[Episode]) -> Iterator[Episode]:
        """Run the episodes' requests on the (otherwise idle) engine; yield each episode as its segment lands."""
        t0 = time.perf_counter()
        owner = {}
        for e in episodes:
            assert e.request is not None
            owner[e.request.request_id] = e
            self.engine.add(e.request)
        while self.engine.has_unfinished():
            for res in self.engine.step():
                e = owner[res.request_id]
                s = e.sample
                if e.continues:
                    s.extend(list(res.token_ids), self.text(res), logprobs=list(res.logprobs),
                             versions=list(res.policy_versions))
                else:
                    s.response_ids, s.rollout_logprobs = list(res.token_ids), list(res.logprobs)
                    s.versions, s.text = list(res.policy_versions), self.text(res)
                s.finish_reason = res.finish_reason
                yield e
        spent = time.perf_counter() - t0
        opened = [e for e in episodes if not e.continues]
        if opened:
            for e in opened:
                e.sample.gen_s = spent / len(opened)
        else:
            self.tools_s += spent

    def calls_tool(self, e: Episode) -> bool:
        return self.tools and self.protocol.tool_call(e.sample.text) is not None

    def run_tools(self, e: Episode) -> bool:
        """Run the call, append its output (environment tokens) and continue the turn; a turn out of calls,
        new-token budget or context is judged as it stands."""
        t0 = time.perf_counter()
        s = e.sample
        name = self.protocol.tool_call(s.text)
        budget = self.params.max_new_tokens - sum(s.model_mask())
        out_text, out_ids = "", []
        if name is not None and s.tool_calls < self.max_tool_calls and budget > 0:
            out_text = self._tool_output(s.item, name, s.text)
            out_ids = self.tok.encode(out_text, add_special_tokens=False)
        self.tools_s += time.perf_counter() - t0
        if not out_ids or len(s.prompt_ids) + len(s.response_ids) + len(out_ids) >= self.engine.max_context:
            return False
        s.tool_calls += 1
        s.extend(out_ids, out_text)
        rid = f"{s.request_id}~tool{s.tool_calls}"
        params = self.params.replace(seed=zlib.crc32(f"{self.seed}:{rid}".encode()), max_new_tokens=budget)
        e.request, e.continues = GenerationRequest(tuple(s.prompt_ids + s.response_ids), params, rid, rid), True
        return True

    def submitted(self, e: Episode) -> bool:
        return e.sample.request_id in self.futures

    def submit(self, e: Episode) -> None:
        """The gym submission: the turn's answer goes to the pool now (identical answers share a verdict)."""
        self.futures[e.sample.request_id] = self.cache.submit(e.sample.item, e.sample.text)

    def verdict(self, e: Episode) -> Verdict:
        t0 = time.perf_counter()
        e.sample.result = self.futures.pop(e.sample.request_id).result()
        self.wait_s[-1] += time.perf_counter() - t0
        return e.sample.result

    def next_turn(self, e: Episode, turn: int) -> bool:
        """The family's feedback tokens after the last turn, then a new turn's request (its seed from the
        last turn's request id); False when the context has no room left for an answer."""
        if len(self.wait_s) <= turn:
            self.wait_s.append(0.0)
        s = e.sample
        ctx = s.prompt_ids + s.response_ids + self.protocol.feedback_ids(self.tok, s.result, s.response_ids)
        if len(ctx) >= self.engine.max_context:
            return False
        seed = zlib.crc32(f"{self.seed}:{s.request_id}:{turn}".encode())
        rid = f"{s.request_id}#t{turn}"  # unique and stable (it seeds nothing else); never parsed
        e.sample = Sample(s.group, s.episode, turn, s.item, ctx, [], [], [], "", "", request_id=rid)
        e.request, e.continues = GenerationRequest(tuple(ctx), self.params.replace(seed=seed), rid, rid), False
        self.samples.append(e.sample)
        return True

    def stop_reason(self, e: Episode) -> str:
        return e.stop_reason

    def stop(self, e: Episode, reason: str) -> None:
        e.stop_reason = reason

    # ---------------------------------------------------------------- tools

    def _tool_output(self, item: Hashable, name: str, text: str) -> str:
        """The output text of the call ending `text`, run by the gym (memoised per task, tool and candidate)."""
        task = self.family.task(item)
        key = (task.id, name, self.protocol.answer(text))
        if key not in self._tool_outputs:
            if task.id not in self._executors:
                self._executors[task.id] = ToolExecutor(self.cache.pool, task, self.family.backend)
            self._tool_outputs[key] = self.protocol.run_tool(self._executors[task.id], name, text)[0]
        return self._tool_outputs[key]


class SubmittingEngine:
    """The `StepGenerator` the CoPRIS scheduler drives: an `Engine` whose finished first-turn segments land
    in the episode loop at once (`Rollout.land`: the answer goes to the gym, or waits for its tool call)
    while the other samples still decode."""

    def __init__(self, engine: Engine, land: Callable[[GenerationResult], None]) -> None:
        self.engine, self.land = engine, land

    @property
    def max_batch_size(self) -> int:
        return int(self.engine.max_batch_size)

    @property
    def policy_version(self) -> int:
        return int(self.engine.policy_version)

    def add(self, request: GenerationRequest, resume_from: GenerationResult | None = None) -> None:
        self.engine.add(request, resume_from=resume_from)

    def has_unfinished(self) -> bool:
        return bool(self.engine.has_unfinished())

    def abort_all(self) -> list[GenerationResult]:
        return list(self.engine.abort_all())

    def generate(self, requests: Any) -> list[GenerationResult]:
        return list(self.engine.generate(requests))

    def step(self) -> list[GenerationResult]:
        done = self.engine.step()
        for res in done:
            self.land(res)
        return done


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
    """Produces one step's samples: prompt groups -> engine -> the episode loop (gym, tools, more turns)."""

    def __init__(self, engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable], *,
                 group_size: int, prompts_per_step: int, params: SamplingParams, mode: str, concurrency: int,
                 turns: int, seed: int, cursor: int = 0, stop_at_first_correct: bool = True,
                 tools: bool = False, max_tool_calls: int = 2) -> None:
        self.tok, self.cache, self.turns = tok, cache, turns
        self.family = cache.family
        self.protocol = self.family.protocol
        self.rules = EpisodeRules(max_turns=turns, tools=tools, max_tool_calls=max_tool_calls,
                                  stop_at_first_correct=stop_at_first_correct)
        if tools:  # generation pauses at a tool call
            params = params.replace(stop_strings=(*params.stop_strings, self.protocol.tool_stop))
        self.params = params
        self.stream = PromptStream(items, tok, params, seed, cursor, self.family, on_item=cache.prefetch)
        self.engine = engine
        self.driver = EngineDriver(engine, tok, cache, params, seed, tools=tools, max_tool_calls=max_tool_calls)
        self.scheduler = CoprisScheduler(SubmittingEngine(engine, self.land), self.stream, group_size=group_size,
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
        futures = self.driver.futures
        results = {rid: futures[rid].result() for rid in waiting if rid in futures}
        return {"cursor": self.stream.cursor, "scheduler": self.scheduler.state_dict(),
                "groups": dict(self.stream.groups),
                "results": {rid: r.to_dict() if r is not None else None for rid, r in results.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.cursor = int(state["cursor"])
        self.stream.groups = {str(k): int(v) for k, v in state.get("groups", {}).items()}
        self.scheduler.load_state_dict(state["scheduler"])
        for rid, result in state["results"].items():
            future: cf.Future[Verdict] = cf.Future()
            future.set_result(EvalResult.from_dict(result) if result is not None else None)
            self.driver.futures[rid] = future

    def land(self, res: GenerationResult) -> None:
        """A first-turn segment finished inside a scheduler step: it lands in the episode loop now (its
        answer goes to the gym while the others decode; one ending in a tool call waits for the tool loop)."""
        land(self.driver, self.driver.first_turn(res, self.stream.item_of(res.group_id)))

    def collect(self) -> list[Sample]:
        """Generate one batch (its answers judged as they land), then run the episode loop on: tool calls,
        verdicts, the remaining turns: for unsolved episodes only (`stop_at_first_correct`), or for every
        episode up to the turn limit (KernelGYM: a correct kernel gets its speedup as feedback and is
        refined further)."""
        t0 = time.perf_counter()
        batch = self.scheduler.next_batch()
        t_gen = time.perf_counter() - t0
        driver = self.driver
        driver.wait_s, driver.tools_s = [0.0], 0.0
        episodes: list[Episode] = []
        for g, group in enumerate(batch.groups):
            for res in group:
                episodes.append(driver.first_turn(res, self.stream.item_of(res.group_id), g, len(episodes)))
            self.stream.groups.pop(group[0].group_id or "", None)
        driver.samples = [e.sample for e in episodes]
        run_episodes(driver, episodes, self.rules, first_turn_landed=True)
        samples = driver.samples  # the verdicts of samples whose group is incomplete stay in `driver.futures`
        self.last_stats = {"time/generate": t_gen + sum(s.gen_s for s in samples),
                           "time/evaluate_wait": driver.wait_s[0], "time/tools": driver.tools_s,
                           "rollout/tool_calls": float(sum(s.tool_calls for s in samples)), "rollout/stale_fraction": batch.stats.stale_fraction,
                           "rollout/aborted": float(batch.stats.aborted), "rollout/resumed": float(batch.stats.resumed)}
        return samples


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


def judge_answers(engine: Engine, tok: Any, cache: EvalCache, items: list[Hashable], *, samples: int,
                  max_new_tokens: int, seed: int) -> list[list[Sample]]:
    """Single-turn episodes through the episode loop, `samples` per item (greedy when 1, else at
    temperature 1), each answer judged by the gym as it lands (held-out evaluation, RFT's sampling);
    per item its samples, each with its answer `text` and verdict `result`."""
    params = SamplingParams(temperature=0.0 if samples == 1 else 1.0, max_new_tokens=max_new_tokens, seed=seed)
    driver = EngineDriver(engine, tok, cache, params, seed)
    episodes = []
    for i, item in enumerate(items):
        prompt = list(cache.family.prompt_ids(tok, item))
        for j in range(samples):
            req = GenerationRequest(tuple(prompt), params.replace(seed=seed + 7919 * i + j), f"h{i}/{j}")
            sample = Sample(i, len(episodes), 0, item, prompt, [], [], [], "", "", request_id=req.request_id)
            episodes.append(Episode(sample, req))
    run_episodes(driver, episodes, EpisodeRules(max_turns=1))
    return [[e.sample for e in episodes[i * samples:(i + 1) * samples]] for i in range(len(items))]
