"""CoPRIS (early termination + partial-rollout buffer) vs synchronous rollout, same engine.

Each training step needs `--groups` complete groups of `--n` samples. Sample lengths are
long-tailed (log-normal per-sample `max_new_tokens`, standing in for reasoning rollouts of very
different lengths). Synchronous mode generates one batch of groups to completion; CoPRIS keeps
`--concurrency` samples in flight, stops once enough groups are complete, and resumes the
stopped samples first in the next step. Between steps the "trainer" bumps the policy version
(and perturbs the weights a little so the versions are real). Prints the rollout wall time of
both over the same number of steps, the ratio (target >= 1.5x; the paper reports up to 1.94x),
and the fraction of trained-on tokens that an older policy version generated.

Where the win comes from: the synchronous tail runs few sequences per engine step. On a GPU a
decode step costs about the same for 1 or 32 sequences (memory-bound), so the tail wastes the
machine; on a CPU a step's cost grows with the rows and their context, so the tail is cheap and
CoPRIS also pays for re-prefilling the resumed partials under new weights and for attending over
padding next to long rows. The defaults use a one-layer model and short lengths, where a step's
cost is mostly fixed overhead, nearly flat in the number of rows (the GPU-like regime);
`--hidden 64 --layers 2 --median-new-tokens 16 --max-new-tokens 256` or bigger moves toward the
compute-bound CPU regime, where the ratio falls (about 1.1-1.4x measured on 2 shared cores; the
prefix cache that lets a group's samples share one prompt prefill matters there). The engine-step
ratio printed alongside is the hardware-independent part of the speed-up; the CPU-time ratio is
the wall-time ratio with the waiting for a shared machine's cores taken out (one torch thread).

    python bench/bench_copris.py [--steps 8] [--groups 8] [--n 8] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import os
import random
import time
from collections.abc import Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from kernelrl.generation import CoprisScheduler, Engine, PromptGroup, SamplingParams
from kernelrl.generation.tiny import build_tiny_causal_lm


def prompt_groups(n: int, vocab: int, seed: int, median: float, sigma: float, cap: int) -> Iterator[PromptGroup]:
    rng = random.Random(seed)
    for i in itertools.count():
        prompt = tuple(rng.randrange(4, vocab) for _ in range(rng.randint(8, 48)))
        params = tuple(
            SamplingParams(temperature=1.0, max_new_tokens=min(cap, max(1, int(rng.lognormvariate(0, sigma) * median))),
                           ignore_eos=True, seed=i)
            for _ in range(n)
        )
        yield PromptGroup(f"g{i}", prompt, params)


def run(model, args, early: bool) -> dict[str, float]:
    model = copy.deepcopy(model)
    engine = Engine(model, max_batch_size=args.concurrency, seed=args.seed)
    source = prompt_groups(args.n, model.config.vocab_size, args.seed, args.median_new_tokens, args.sigma,
                           args.max_new_tokens)
    sched = CoprisScheduler(engine, source, group_size=args.n, groups_per_batch=args.groups,
                            concurrency=args.concurrency, early_termination=early)
    gen = torch.Generator().manual_seed(args.seed)
    wall = cpu = tokens = stale = generated = 0.0
    groups = 0
    for _ in range(args.steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        batch = sched.next_batch()
        wall += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        groups += len(batch.groups)
        tokens += batch.stats.batch_tokens
        stale += batch.stats.stale_tokens
        generated += batch.stats.generated_tokens
        with torch.no_grad():  # the "trainer": a small weight change, then a version bump
            for p in model.parameters():
                p.add_(1e-3 * torch.randn(p.shape, generator=gen))
        engine.update_weights()
    return {"wall": wall, "cpu": cpu, "groups": groups, "tokens": tokens, "stale": stale, "generated": generated,
            "steps": engine.stats.steps, "buffered": len(sched.buffered),
            "prefill": engine.stats.prefill_tokens, "kv_pad": engine.stats.decode_padding_fraction}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--groups", type=int, default=8, help="complete groups per training step")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--median-new-tokens", type=float, default=8)
    ap.add_argument("--sigma", type=float, default=1.2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the fastest of each mode is kept")
    ap.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_copris.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = build_tiny_causal_lm(512, hidden_size=args.hidden, num_layers=args.layers,
                                 max_position_embeddings=1024, seed=args.seed)
    print(f"model: llama hidden={args.hidden} layers={args.layers}; {args.steps} steps x {args.groups} groups x "
          f"{args.n} samples, concurrency {args.concurrency}, lengths log-normal median {args.median_new_tokens:g} "
          f"sigma {args.sigma:g} cap {args.max_new_tokens}")
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(args.repeats):  # interleaved, so load from other processes hits both alike
        for early in (False, True):
            runs[early].append(run(model, args, early))
    sync, copris = (min(runs[e], key=lambda r: r["wall"]) for e in (False, True))
    for name, r in (("synchronous", sync), ("CoPRIS", copris)):
        print(f"{name:>12}: {r['groups']:.0f} complete groups ({r['tokens']:.0f} tokens) in {r['wall']:.2f} s "
              f"rollout wall time ({r['cpu']:.2f} s CPU), {r['steps']:.0f} engine steps, {r['generated']:.0f} tokens generated, "
              f"older-policy tokens {r['stale'] / max(1, r['tokens']):.1%}, partials left in buffer {r['buffered']:.0f}, "
              f"prefill tokens {r['prefill']:.0f}, decode KV padding {r['kv_pad']:.0%}")
    print(f"rollout wall-time ratio synchronous / CoPRIS: {sync['wall'] / copris['wall']:.2f}x (target >= 1.5x); "
          f"CPU-time ratio {sync['cpu'] / copris['cpu']:.2f}x; engine-step ratio {sync['steps'] / copris['steps']:.2f}x "
          f"(best of {args.repeats})")
    print(f"fraction of trained-on tokens generated under an older policy version (CoPRIS): "
          f"{copris['stale'] / max(1, copris['tokens']):.1%}")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_copris", {
            "settings": {k: v for k, v in vars(args).items() if k != "no_write"},
            "sync_wall_s": sync["wall"], "copris_wall_s": copris["wall"], "wall_ratio": sync["wall"] / copris["wall"],
            "cpu_ratio": sync["cpu"] / copris["cpu"], "engine_step_ratio": sync["steps"] / copris["steps"],
            "copris_stale_token_fraction": copris["stale"] / max(1, copris["tokens"])}))


if __name__ == "__main__":
    main()
