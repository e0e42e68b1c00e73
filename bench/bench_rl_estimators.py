"""Benchmark: vectorised advantage estimators vs straightforward per-group Python loops.

For each estimator registered in `kernelrl.rl.ADVANTAGE_ESTIMATORS` that this script knows
(grpo, drgrpo, rloo, reinforce++, trloo, prime, opd) it builds one batch, runs the library's
vectorised implementation and a reference written here as a plain loop over groups (each group's
rows handled as a small tensor), checks the two agree, and prints times and speedups measured
side by side in one run.

    python bench/bench_rl_estimators.py                     # 8192 samples x 1024 tokens
    python bench/bench_rl_estimators.py --samples 1024 --tokens 256 --threads 1

Reading the numbers: the vectorised estimators are bound by memory passes over the ``[B, T]``
tensors, the loops by per-group dispatch (tens of microseconds per group, each group's slice
staying in cache). With glibc, tensors of 32 MiB and more are mmapped and returned on free, so
every call page-faults its outputs in, which dominates the vectorised times; an allocator that
keeps freed memory (jemalloc, tcmalloc, or ``--keep-freed-memory``) removes that cost. One
thread writes the 32 MiB output of grpo/rloo in ~3.5 ms at best, so on a CPU the ratio to a
~40 ms loop stays near 10x; prime and reinforce++ also whiten over the whole batch in both
implementations. On a GPU (``--device cuda``) the loops pay a kernel launch per op per group. On a machine shared with other work,
``--threads 1`` gives the steadiest comparison (with more threads each small op of the loops may
wait for a descheduled worker thread).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing
from kernelrl.rl import ADVANTAGE_ESTIMATORS

# ---------------------------------------------------------------- reference (per-group loops)


def _rows(group_ids: Tensor) -> list[Tensor]:
    """Row indices of each group, one `==` scan per group (the straightforward way)."""
    return [(group_ids == g).nonzero().squeeze(1) for g in group_ids.unique().tolist()]


def ref_grpo(rewards: Tensor, group_ids: Tensor, mask: Tensor, *, eps: float = 1e-6, std: bool = True) -> Tensor:
    out = rewards.new_zeros(mask.shape)
    m = mask.to(rewards.dtype)
    for rows in _rows(group_ids):
        r = rewards[rows]
        if len(rows) == 1:
            continue
        adv = r - r.mean()
        if std:
            s = r.std()
            adv = adv / (s + eps) if s + eps > 0 else torch.zeros_like(adv)
        out[rows] = adv.unsqueeze(1) * m[rows]
    return out


def ref_rloo(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> Tensor:
    out = rewards.new_zeros(mask.shape)
    m = mask.to(rewards.dtype)
    for rows in _rows(group_ids):
        r = rewards[rows]
        k = len(rows)
        adv = r if k == 1 else r - (r.sum() - r) / (k - 1)
        out[rows] = adv.unsqueeze(1) * m[rows]
    return out


def _returns(token_rewards: Tensor, gamma: float) -> Tensor:
    """Return-to-go of [n, T] rows of right-padded responses (padding rewards are zero)."""
    if gamma == 1.0:
        return token_rewards.flip(1).cumsum(1).flip(1)
    out = torch.zeros_like(token_rewards)
    running = token_rewards.new_zeros(token_rewards.shape[0])
    for t in range(token_rewards.shape[1] - 1, -1, -1):
        running = token_rewards[:, t] + gamma * running
        out[:, t] = running
    return out


def _whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    vals = x[mask]
    mean = vals.mean()
    var = ((vals - mean) ** 2).mean()
    return (x - mean) * torch.rsqrt(var + eps) * mask


def ref_reinforce_pp(rewards: Tensor, group_ids: Tensor, mask: Tensor, *, token_kl: Tensor, kl_coef: float) -> Tensor:
    """REINFORCE++-baseline: per group, subtract the mean, place at the last token, returns; whiten."""
    returns = rewards.new_zeros(mask.shape)
    m = mask.to(rewards.dtype)
    lengths = mask.sum(1)
    for rows in _rows(group_ids):
        r = rewards[rows] - rewards[rows].mean()
        tok = -kl_coef * token_kl[rows] * m[rows]
        tok[torch.arange(len(rows), device=tok.device), lengths[rows] - 1] += r
        returns[rows] = _returns(tok, 1.0) * m[rows]
    return _whiten(returns, mask)


def ref_prime(rewards: Tensor, group_ids: Tensor, mask: Tensor, *, process_rewards: Tensor) -> Tensor:
    adv = rewards.new_zeros(mask.shape)
    m = mask.to(rewards.dtype)
    for rows in _rows(group_ids):
        k = len(rows)
        proc = process_rewards[rows] * m[rows]
        score = proc.sum(1) / m[rows].sum(1)
        o = rewards[rows]
        if k > 1:
            base = (score.sum() - score) / (k - 1)
            o = o - (o.sum() - o) / (k - 1)
        else:
            base = torch.zeros_like(score)
        tok = (proc - base.unsqueeze(1)) * m[rows]
        adv[rows] = (_returns(tok, 1.0) + o.unsqueeze(1)) * m[rows]
    return _whiten(adv, mask)


def ref_opd(rewards: Tensor, group_ids: Tensor, mask: Tensor, *, token_rewards: Tensor, outcome_coef: float) -> Tensor:
    return token_rewards * mask + outcome_coef * ref_grpo(rewards, group_ids, mask)


def ref_trloo(rewards: Tensor, group_ids: Tensor, mask: Tensor, *, turn_index: Tensor, episode_ids: Tensor,
              counts: Tensor, gamma: float) -> Tensor:
    returns = torch.zeros_like(rewards)
    for rows in _rows(episode_ids):  # per episode: returns over its turns, last turn first
        rows = rows[torch.argsort(turn_index[rows])]
        g = 0.0
        for i in reversed(rows.tolist()):
            g = float(rewards[i]) + gamma * g
            returns[i] = g
    adv = torch.zeros_like(rewards)
    key = group_ids * (int(turn_index.max()) + 1) + turn_index
    for rows in _rows(key):  # per (prompt, turn) group over the turns that count
        rows = rows[counts[rows]]
        g = returns[rows]
        n = len(rows)
        adv[rows] = g if n == 1 else g - (g.sum() - g) / max(n - 1, 1)
    return adv.unsqueeze(1) * mask.to(rewards.dtype)


# ---------------------------------------------------------------- inputs and timing


def make_inputs(samples: int, tokens: int, group_size: int, seed: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, tokens + 1, (samples,), generator=gen)
    mask = torch.arange(tokens).unsqueeze(0) < lengths.unsqueeze(1)
    groups = torch.arange(samples) // group_size
    rewards = (torch.rand(samples, generator=gen) < 0.5).float() + 0.1 * torch.rand(samples, generator=gen)
    # multi-turn layout for TRLOO: episodes of `turns` turns, `group_size // 2` episodes per prompt
    turns = 4
    episode = torch.arange(samples) // turns
    turn = torch.arange(samples) % turns
    prompt = episode // max(group_size // 2, 1)
    return {
        "mask": mask, "groups": groups, "rewards": rewards,
        "token_kl": torch.rand(samples, tokens, generator=gen) * 0.1,
        "process": torch.randn(samples, tokens, generator=gen) * 0.05,
        "token_rewards": torch.randn(samples, tokens, generator=gen),
        "prompt": prompt, "episode": episode, "turn": turn,
        "counts": torch.rand(samples, generator=gen) < 0.9,
    }


def cases(x: dict[str, Any]) -> dict[str, tuple[Callable[[], Tensor], Callable[[], Tensor]]]:
    r, g, m = x["rewards"], x["groups"], x["mask"]
    est = ADVANTAGE_ESTIMATORS.get
    multi = {"turn_index": x["turn"], "episode_ids": x["episode"], "counts": x["counts"], "gamma": 0.9}
    return {
        "grpo": (lambda: est("grpo")(r, g, m), lambda: ref_grpo(r, g, m)),
        "drgrpo": (lambda: est("drgrpo")(r, g, m), lambda: ref_grpo(r, g, m, std=False)),
        "rloo": (lambda: est("rloo")(r, g, m), lambda: ref_rloo(r, g, m)),
        "reinforce++": (
            lambda: est("reinforce++")(r, g, m, token_kl=x["token_kl"], kl_coef=0.05, group_baseline=True),
            lambda: ref_reinforce_pp(r, g, m, token_kl=x["token_kl"], kl_coef=0.05),
        ),
        "trloo": (lambda: est("trloo")(r, x["prompt"], m, **multi), lambda: ref_trloo(r, x["prompt"], m, **multi)),
        "prime": (lambda: est("prime")(r, g, m, process_rewards=x["process"]),
                  lambda: ref_prime(r, g, m, process_rewards=x["process"])),
        "opd": (lambda: est("opd")(r, g, m, token_rewards=x["token_rewards"], outcome_coef=0.5),
                lambda: ref_opd(r, g, m, token_rewards=x["token_rewards"], outcome_coef=0.5)),
    }


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class Timing:
    """Best wall-clock and best CPU (user + system, all threads) seconds over the repeats."""

    def __init__(self) -> None:
        self.wall = float("inf")
        self.cpu = float("inf")

    def run(self, fn: Callable[[], Tensor]) -> Tensor:
        _sync()
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        _sync()
        self.wall = min(self.wall, time.perf_counter() - wall)
        self.cpu = min(self.cpu, time.process_time() - cpu)
        return out


def side_by_side(vec: Callable[[], Tensor], ref: Callable[[], Tensor], repeats: int
                 ) -> tuple[Timing, Timing, Tensor, Tensor]:
    """Time both implementations alternately, so both see the same machine load."""
    a, b = vec(), ref()  # warm-up (allocator, first-call dispatch)
    t_vec, t_ref = Timing(), Timing()
    for _ in range(repeats):
        a = t_vec.run(vec)
        b = t_ref.run(ref)
    return t_vec, t_ref, a, b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per implementation (best is kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", help="estimator names to run (default: all)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the loops then launch small kernels per group)")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="glibc keeps freed blocks (as kernelrl's evaluation workers do), so fresh [B, T] outputs "
                             "stop page-faulting in on every call")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_rl_estimators.json")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.keep_freed_memory:
        from kernelrl.evaluate.warm import keep_freed_memory

        keep_freed_memory(largest_block=2**30)  # serve even the 32 MiB [B, T] tensors from the heap

    x = {k: v.to(args.device) for k, v in make_inputs(args.samples, args.tokens, args.group_size, args.seed).items()}
    print(f"{args.samples} samples x {args.tokens} tokens, group size {args.group_size}, "
          f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} threads, best of {args.repeats}")
    print("wall = best wall-clock time; cpu = best CPU time of the process (user + system, all threads)")
    print(f"{'estimator':<14}{'vec wall ms':>12}{'loop wall ms':>14}{'speedup':>9}"
          f"{'vec cpu ms':>12}{'loop cpu ms':>13}{'speedup':>9}{'max |diff|':>12}")
    ok = True
    speedups = []
    rows: dict[str, dict[str, float]] = {}
    for name, (vec, ref) in cases(x).items():
        if args.only and name not in args.only:
            continue
        t_vec, t_ref, a, b = side_by_side(vec, ref, args.repeats)
        diff = (a - b).abs().max().item()
        agree = torch.allclose(a, b, atol=1e-4, rtol=1e-4)
        ok &= agree
        speedups.append((t_ref.wall / t_vec.wall, t_ref.cpu / max(t_vec.cpu, 1e-9)))
        rows[name] = {"vec_wall_ms": t_vec.wall * 1e3, "loop_wall_ms": t_ref.wall * 1e3, "wall_speedup": speedups[-1][0],
                      "cpu_speedup": speedups[-1][1], "max_abs_diff": diff, "agree": agree}
        print(f"{name:<14}{t_vec.wall * 1e3:>12.2f}{t_ref.wall * 1e3:>14.1f}{speedups[-1][0]:>8.1f}x"
              f"{t_vec.cpu * 1e3:>12.2f}{t_ref.cpu * 1e3:>13.1f}{speedups[-1][1]:>8.1f}x{diff:>12.2e}"
              f"{'' if agree else '  MISMATCH'}")
    if speedups:
        geo = torch.tensor(speedups).log().mean(0).exp().tolist()
        print(f"geometric-mean speedup: wall {geo[0]:.1f}x, cpu {geo[1]:.1f}x; outputs "
              f"{'agree' if ok else 'DISAGREE'} (atol 1e-4, rtol 1e-4)")
        met = sum(w >= 20 for w, _ in speedups)
        print(f"target >= 20x (wall): met by {met} of {len(speedups)} estimators")
        if not args.no_write:
            from results_file import write_result

            print("written:", write_result("bench_rl_estimators", {
                "settings": {k: v for k, v in vars(args).items() if k != "no_write"},
                "threads_used": torch.get_num_threads(), "estimators": rows,
                "geomean_wall_speedup": geo[0], "geomean_cpu_speedup": geo[1], "outputs_agree": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
