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
import functools
import random
import time
import zlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from kernelrl.agent.episode_loop import EpisodeRules, land, run_episodes
from kernelrl.agent.episode_protocol import Verdict
from kernelrl.evaluate import EvalResult
from kernelrl.generation import (
    CoprisScheduler,
    Engine,
    GenerationRequest,
    GenerationResult,
    PromptGroup,
    SamplingParams,
)
from kernelrl.train.engine_episodes import EngineDriver, Episode, EvalCache, Sample, SubmittingEngine
from kernelrl.train.task_family import TaskFamily, TinyFamily

__all__ = ["EvalCache", "PromptStream", "Rollout", "Sample", "collect_episodes", "judge_answers"]


class PromptStream:
    """Endless prompt groups over the train items: a fresh seeded permutation per epoch; `cursor`
    counts groups handed out, so a resumed run continues the same stream."""

    def __init__(self, items: list[Hashable], tok: Any, params: SamplingParams, seed: int,
                 cursor: int = 0, family: TaskFamily | None = None,
                 on_item: Callable[[Hashable], None] | None = None,
                 on_ahead: Callable[[Hashable], None] | None = None, lookahead: int = 0) -> None:
        """`on_item`: called with each group's item as it is handed out (the gym prefetches its reference);
        `on_ahead`: with the item `lookahead` groups further on, which the stream will hand out later, once the
        rollout calls `release_ahead` (after generation: the gym then times those references in the step's
        tail and update, off the path of that later step's verdicts and off the policy's CPU while it decodes)."""
        self.items, self.tok, self.params, self.seed, self.cursor = items, tok, params, seed, cursor
        self.on_item, self.on_ahead, self.lookahead = on_item, on_ahead, lookahead
        self.family = family or TinyFamily([], [])
        self.groups: dict[str, int] = {}  # group id handed to the scheduler -> its stream position
        self.pending_ahead: list[int] = []  # stream positions whose references `release_ahead` asks for

    def item_of(self, group_id: str | None) -> Hashable:
        """The item of a group this stream handed out."""
        return self.item_at(self.groups[group_id or ""])

    def item_at(self, k: int) -> Hashable:
        epoch, i = divmod(k, len(self.items))
        order = list(range(len(self.items)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return self.items[order[i]]

    def release_ahead(self) -> None:
        """Hand the items `lookahead` groups past those handed out since the last call to `on_ahead`."""
        pending, self.pending_ahead = self.pending_ahead, []
        if self.on_ahead is not None:
            for k in pending:
                self.on_ahead(self.item_at(k))

    def __iter__(self) -> Iterator[PromptGroup]:
        while True:
            k = self.cursor
            self.cursor += 1
            item = self.item_at(k)
            seed = zlib.crc32(f"{self.seed}:{k}".encode())
            self.groups[f"{k}"] = k
            if self.on_item is not None:
                self.on_item(item)
            if self.on_ahead is not None and self.lookahead > 0:
                self.pending_ahead.append(k + self.lookahead)
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
        # the next step's items are known (a seeded stream): their references are timed ahead, once this
        # step's generation is done (on 2 cores, earlier they take the CPU the policy decodes on)
        self.stream = PromptStream(items, tok, params, seed, cursor, self.family, on_item=cache.prefetch,
                                   on_ahead=functools.partial(cache.prefetch, ahead=True), lookahead=prompts_per_step)
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
        self.stream.release_ahead()
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
