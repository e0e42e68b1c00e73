"""Our trainer's GRPO step vs trl's GRPOTrainer step, same tiny model, batch, group size and lengths.

Both sides: a locally built tiny Llama and BPE tokenizer (no download), P prompts x G samples,
prompts of the tiny kernel family, up to `--new` new tokens (both stop at EOS), the same cheap Python reward (share of the
response that is ';' or 'v', so the gym is not what is timed), one optimizer step per batch, CPU.
Ours = `Engine` sampling (KV cache, continuous batching) + `RLTrainer.update`; trl =
`GRPOTrainer.train` with a callback that times each step. First step of each is warm-up, dropped.

    PYTHONPATH=src python bench/bench_trainer_vs_trl.py --steps 5 --prompts 4 --group 4 --new 32
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from kernelrl.generation import GenerationRequest, SamplingParams
from kernelrl.train.config import RLConfig, load_config
from kernelrl.train.elementwise_chains import prompt_text, split_chains, tokenizer_corpus
from kernelrl.train.model import build_model, encode_prompt
from kernelrl.train.rollout import Sample


def toy_reward(text: str) -> float:
    return sum(ch in ";v" for ch in text) / max(1, len(text))


def _no_gym(chains: list) -> Any:
    """An evaluation cache with no pool behind it: this benchmark times the trainer, not the gym."""
    from kernelrl.train.rollout import EvalCache
    from kernelrl.train.task_family import TinyFamily

    return EvalCache(None, TinyFamily(chains, []))  # type: ignore[arg-type]


def ours(args: argparse.Namespace, chains: list) -> tuple[list[float], list[float]]:
    from kernelrl.train.trainer import RLTrainer

    cfg = load_config("smoke")
    model, tok = build_model(cfg.model.model_copy(update={"hidden_size": args.hidden, "num_layers": args.layers}),
                             tokenizer_corpus(), 0)
    rl = RLConfig(algo="grpo", group_size=args.group, prompts_per_step=args.prompts, max_new_tokens=args.new,
                  micro_batch_size=args.prompts * args.group, dynamic_sampling=False, lr=1e-4)
    tr = RLTrainer(rl, model, tok, _no_gym(chains), chains, seed=0, max_context=cfg.model.max_positions)  # type: ignore[arg-type]
    times: list[float] = []
    cpu: list[float] = []
    lengths: list[float] = []
    for step in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        params = SamplingParams(temperature=1.0, max_new_tokens=args.new)  # stops at EOS, as trl does
        reqs = [GenerationRequest(tuple(encode_prompt(tok, prompt_text(chains[(step * args.prompts + i) % len(chains)]))),
                                  params.replace(seed=step * 100 + i * 10 + j), f"{i}/{j}", str(i))
                for i in range(args.prompts) for j in range(args.group)]
        samples = []
        for r in tr.engine.generate(reqs):
            g = int(r.group_id or 0)
            text = tok.decode(r.token_ids, skip_special_tokens=True)
            s = Sample(g, len(samples), 0, (), list(r.prompt_token_ids), list(r.token_ids), list(r.logprobs),
                       list(r.policy_versions), text, r.finish_reason, reward=toy_reward(text))
            samples.append(s)
        tr.update(samples)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        lengths.append(sum(len(s.response_ids) for s in samples) / len(samples))
    print(f"ours: mean completion length {statistics.mean(lengths):.1f} tokens")
    return times, cpu


def trl_steps(args: argparse.Namespace, chains: list) -> tuple[list[float], list[float]] | str:
    try:
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        return f"trl not available ({exc}); install with `pip install --no-deps trl`"
    cfg = load_config("smoke")
    model, tok = build_model(cfg.model.model_copy(update={"hidden_size": args.hidden, "num_layers": args.layers}),
                             tokenizer_corpus(), 0)
    model.train()
    prompts = [tok.bos_token + prompt_text(chains[i % len(chains)]) for i in range(args.prompts * (args.steps + 1))]
    data = Dataset.from_dict({"prompt": prompts})

    def reward(completions: list[str], **_: object) -> list[float]:
        return [toy_reward(c) for c in completions]

    times: list[float] = []
    cpu: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a: object, **k: object) -> None:
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, *a: object, **k: object) -> None:
            times.append(time.perf_counter() - self.t0)
            cpu.append(time.process_time() - self.c0)

    conf = GRPOConfig(output_dir="/tmp/kernelrl_trl_bench", per_device_train_batch_size=args.prompts * args.group,
                      num_generations=args.group, max_completion_length=args.new, max_steps=args.steps,
                      learning_rate=1e-4, logging_steps=1000, report_to="none", use_cpu=True, save_strategy="no",
                      temperature=1.0, beta=0.0, seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=conf, train_dataset=data, processing_class=tok,
                          callbacks=[Timer()])
    out = trainer.train()
    print(f"trl: mean completion length {trainer.state.log_history[-1].get('completions/mean_length', 'n/a')} "
          f"(last logged), train_runtime {out.metrics.get('train_runtime')}")
    return times, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads for both sides (1: a tiny model's small ops only lose to thread hand-offs)")
    ap.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_trainer_vs_trl.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    chains, _ = split_chains(seed=0, n_train=64, n_heldout=4)
    rows = [("kernelrl RLTrainer", ours(args, chains))]
    t = trl_steps(args, chains)
    if isinstance(t, str):
        print(t)
    else:
        rows.append(("trl GRPOTrainer", t))
    print(f"batch {args.prompts} prompts x {args.group} samples, {args.new} new tokens, hidden {args.hidden}, "
          f"{args.layers} layers, {args.threads} threads; median of steps 2..{args.steps} (first dropped); "
          "cpu = process CPU time (steady on a shared machine)")
    print("| trainer | median s/step | median cpu s/step | all steps (s) |\n|---|---|---|---|")
    med: dict[str, tuple[float, float]] = {}
    for name, (wall, cpu) in rows:
        med[name] = (statistics.median(wall[1:]) if len(wall) > 1 else wall[0],
                     statistics.median(cpu[1:]) if len(cpu) > 1 else cpu[0])
        print(f"| {name} | {med[name][0]:.3f} | {med[name][1]:.3f} | {', '.join(f'{x:.2f}' for x in wall)} |")
    if len(med) == 2:
        a, b = med["trl GRPOTrainer"], med["kernelrl RLTrainer"]
        print(f"speed-up (trl / ours): {a[0] / b[0]:.2f}x wall, {a[1] / b[1]:.2f}x cpu (target >= 2x)")
        if not args.no_write:
            from results_file import write_result

            print("written:", write_result("bench_trainer_vs_trl", {
                "settings": {k: v for k, v in vars(args).items() if k != "no_write"},
                "median_s_per_step": {k: v[0] for k, v in med.items()},
                "median_cpu_s_per_step": {k: v[1] for k, v in med.items()},
                "wall_speedup": a[0] / b[0], "cpu_speedup": a[1] / b[1]}))

if __name__ == "__main__":
    main()
