"""The episode loop at the token level: a turn's `Sample`, the run's `EvalCache`, and `EngineDriver`, the
`agent.episode_loop.TurnDriver` over the generation engine that `train.rollout` drives.

`EngineDriver` generates many episodes' segments in one engine batch; each segment lands in the loop as it
finishes and its answer goes to the gym at once (`EngineDriver.submit`), so the gym judges it while the
others still decode. `SubmittingEngine` is the engine the CoPRIS scheduler steps: it lands the first turn's
segments the same way.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
import zlib
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from kernelrl.agent.episode_protocol import Verdict
from kernelrl.agent.tools import ToolExecutor
from kernelrl.evaluate import EvalPool, EvalResult, VerdictCache
from kernelrl.generation import Engine, GenerationRequest, GenerationResult, SamplingParams
from kernelrl.train.task_family import TaskFamily


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
        self._prefetched: set[tuple[str, bool]] = set()

    def prefetch(self, item: Hashable, ahead: bool = False) -> None:
        """Have the pool time `item`'s reference now, while its answers are still being generated, or, `ahead`
        (an item of a later step), whenever a worker of the pool would otherwise be idle."""
        task = self.family.task(item)
        if (task.id, ahead) not in self._prefetched and hasattr(self.pool, "prefetch"):
            self._prefetched.add((task.id, ahead))
            self.pool.prefetch(task, self.family.backend, ahead=ahead)

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
