"""Continuous batching (kernelrl Engine) vs `transformers` `generate` with padded static batches.

Both sample the same long-tailed workload (per-request `max_new_tokens` drawn from a log-normal
distribution, prompts of different lengths) from the same tiny model with the same sampling
settings, side by side in one process. `generate` runs each batch of `--batch-size` requests, in
arrival order, until its longest request is done (left-padded prompts); only each request's own
tokens count as useful. The engine keeps `--batch-size` sequences in flight and refills a slot as
soon as its sequence finishes. Prints useful tokens/s for both and their ratio (target >= 1.5x).

    python bench/bench_continuous_batching.py [--requests 128] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from kernelrl.generation import Engine, GenerationRequest, SamplingParams
from kernelrl.generation.tiny import build_tiny_causal_lm


def workload(n: int, vocab: int, seed: int, median: float, sigma: float, cap: int) -> list[GenerationRequest]:
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        prompt = [rng.randrange(4, vocab) for _ in range(rng.randint(8, 48))]
        new = min(cap, max(1, int(rng.lognormvariate(0, sigma) * median)))
        params = SamplingParams(temperature=0.8, top_k=50, top_p=0.95, max_new_tokens=new, ignore_eos=True, seed=i)
        reqs.append(GenerationRequest(prompt, params, str(i)))
    return reqs


def run_generate(model, reqs: list[GenerationRequest], batch_size: int) -> tuple[int, float, int, float]:
    """(useful tokens, seconds, generated token slots incl. padding rows, CPU seconds), padded static batches."""
    p = reqs[0].params
    useful = slots = 0
    start, start_cpu = time.perf_counter(), time.process_time()
    for b in range(0, len(reqs), batch_size):
        batch = reqs[b : b + batch_size]
        width = max(len(r.prompt_token_ids) for r in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(batch):
            ids[i, width - len(r.prompt_token_ids) :] = torch.tensor(r.prompt_token_ids)
            mask[i, width - len(r.prompt_token_ids) :] = 1
        longest = max(r.params.max_new_tokens for r in batch)
        with torch.inference_mode():
            out = model.generate(
                ids, attention_mask=mask, do_sample=True, temperature=p.temperature, top_k=p.top_k,
                top_p=p.top_p, max_new_tokens=longest, min_new_tokens=longest, pad_token_id=0,
            )
        made = out.shape[1] - width
        useful += sum(min(r.params.max_new_tokens, made) for r in batch)
        slots += made * len(batch)
    return useful, time.perf_counter() - start, slots, time.process_time() - start_cpu


def run_engine(model, reqs: list[GenerationRequest], batch_size: int) -> tuple[int, float, Engine, float]:
    """(tokens, seconds, the engine, CPU seconds) for continuous batching."""
    engine = Engine(model, max_batch_size=batch_size)
    start, start_cpu = time.perf_counter(), time.process_time()
    results = engine.generate(reqs)
    elapsed = time.perf_counter() - start
    return sum(len(r.token_ids) for r in results), elapsed, engine, time.process_time() - start_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--median-new-tokens", type=float, default=24)
    ap.add_argument("--sigma", type=float, default=1.0, help="log-normal spread of the output lengths")
    ap.add_argument("--max-new-tokens", type=int, default=400)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the fastest of each is kept")
    ap.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_continuous_batching.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    vocab = 512
    model = build_tiny_causal_lm(vocab, hidden_size=args.hidden, num_layers=args.layers,
                                 max_position_embeddings=1024, seed=args.seed)
    reqs = workload(args.requests, vocab, args.seed, args.median_new_tokens, args.sigma, args.max_new_tokens)
    lengths = sorted(r.params.max_new_tokens for r in reqs)
    print(f"model: llama hidden={args.hidden} layers={args.layers}; {args.requests} requests, batch {args.batch_size}, "
          f"new tokens median {lengths[len(lengths) // 2]} p90 {lengths[int(0.9 * len(lengths))]} max {lengths[-1]}")
    run_engine(model, reqs[:4], 4)  # warm up both paths
    run_generate(model, reqs[:4], 4)

    g_runs, e_runs = [], []
    for _ in range(args.repeats):  # interleaved, so load from other processes hits both alike
        g_runs.append(run_generate(model, reqs, args.batch_size))
        e_runs.append(run_engine(model, reqs, args.batch_size))
    g_tokens, g_s, g_slots, g_cpu = min(g_runs, key=lambda r: r[1])
    e_tokens, e_s, engine, e_cpu = min(e_runs, key=lambda r: r[1])
    g_tps, e_tps = g_tokens / g_s, e_tokens / e_s
    print(f"transformers generate (padded static batches): {g_tokens} useful tokens in {g_s:.2f} s (best of {args.repeats}) = {g_tps:.0f} tok/s "
          f"({g_tokens / g_slots:.0%} of generated slots useful)")
    st = engine.stats
    print(f"kernelrl Engine (continuous batching):         {e_tokens} tokens in {e_s:.2f} s (best of {args.repeats}) = {e_tps:.0f} tok/s "
          f"({st.steps} steps, {st.forward_calls} forwards, prefill padding "
          f"{st.prefill_padding_tokens / max(1, st.prefill_tokens + st.prefill_padding_tokens):.1%}, "
          f"decode KV padding {st.decode_padding_fraction:.1%})")
    print(f"throughput ratio engine / generate: {e_tps / g_tps:.2f}x (target >= 1.5x); "
          f"CPU-time ratio {g_cpu / e_cpu:.2f}x")

    # Control: equal output lengths leave nothing for continuous batching to win, so this ratio is
    # the per-step overhead difference between the two implementations.
    n = min(len(reqs), 2 * args.batch_size)
    same = [GenerationRequest(r.prompt_token_ids, r.params.replace(max_new_tokens=lengths[len(lengths) // 2]), r.request_id)
            for r in reqs[:n]]
    cg_tokens, cg_s, _, _ = min((run_generate(model, same, args.batch_size) for _ in range(args.repeats)),
                                key=lambda r: r[1])
    ce_tokens, ce_s, _, _ = min((run_engine(model, same, args.batch_size) for _ in range(args.repeats)),
                                key=lambda r: r[1])
    print(f"control, equal lengths ({n} requests): generate {cg_tokens / cg_s:.0f} tok/s, engine {ce_tokens / ce_s:.0f} tok/s, "
          f"ratio {(ce_tokens / ce_s) / (cg_tokens / cg_s):.2f}x")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_continuous_batching", {
            "settings": {k: v for k, v in vars(args).items() if k != "no_write"},
            "generate_tok_s": g_tps, "engine_tok_s": e_tps, "throughput_ratio": e_tps / g_tps,
            "cpu_time_ratio": g_cpu / e_cpu, "generate_useful_fraction": g_tokens / g_slots,
            "control_equal_lengths_ratio": (ce_tokens / ce_s) / (cg_tokens / cg_s)}))


if __name__ == "__main__":
    main()
