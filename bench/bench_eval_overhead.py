"""The gym's cost per evaluation, side by side with the work it times, and its throughput.

Three measurements in one run, all through the real pool (judge and candidate processes, builds cached,
the reference timed once per task as in a training run):

1. A 64k-element ReLU, n evaluations one after another: each one's cost by part (static, build, init,
   correctness, timing, timed calls, profile settling, reference, fork and teardown; see
   `kernelrl.evaluate.costs`) as p50/p95, and the gym's own cost: everything but the candidate's timed
   calls and its build; and over the same n, the CPU of the gym's processes per evaluation (the supervisors and
   everything they reaped: judges, candidates, compilers) and their minor page faults, read from /proc. Then n
   evaluations submitted at once: evaluations per second on `--workers`.
2. A 2M-element ReLU: what its evaluation costs in all against the work it times (the timed calls), and the
   floor of that ratio on this design: what the judge itself must do per correctness trial with fresh inputs
   (draw the task's inputs, run the reference, compare the whole output), timed in this process on the
   judge's thread count, times the trials, beside the timed calls; and the comparison side by side with the
   same check on whole-tensor temporaries, as the judge made it before it compared by chunks.
3. With `--fresh`: the small kernel in a fresh Python process per evaluation (what a per-request
   subprocess service does), for the ratio to the warm pool.

Targets (the gym-throughput issue, 2 cores): >= 20 evaluations/s, the gym's own cost <= 25 ms p50, the
large kernel's evaluation <= 1.3x the work it times.

    python bench/bench_eval_overhead.py [--n 50] [--workers 2] [--fresh]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool, EvalResult
from kernelrl.evaluate.costs import PARTS, costs_table, summarise_costs
from kernelrl.tasks import Task

TASK = """
import torch
import torch.nn as nn

n = 65536


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""

CANDIDATE = '''
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp("""
void relu2(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = (x[i] > 0 ? x[i] : 0) * 2.0f; }
""", ["relu2"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        lib.relu2(x, y, x.numel())
        return y
'''


def sized(elements: int) -> Task:
    return Task(id=f"bench/relu2_{elements}", source=TASK.replace("n = 65536", f"n = {elements}"))


def stage_seconds(result: EvalResult) -> float:
    return sum(s.duration_s for s in result.stages)


def supervisor_pids() -> list[int]:
    """The pool's supervisor processes: this process's outermost descendants that are Python running
    `kernelrl.evaluate.supervisor` (not the bubblewrap that starts one; their judges and candidates, forked from them,
    have the same command line)."""
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if pid != os.getpid() and b"python" in os.path.basename(argv[0]) and b"kernelrl.evaluate.supervisor" in argv:
                found.append(pid)
                continue
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_and_faults(pids: list[int]) -> tuple[float, int]:
    """CPU seconds (user + system) and minor page faults of `pids` and of every descendant they have reaped
    (`/proc/PID/stat`: utime, stime, cutime, cstime; minflt, cminflt): each supervisor reaps its judges and, as
    their subreaper, the candidates they leave to it, and its build service's compilers are its own children. A
    spare judge forked ahead and not yet reaped when the window closes is left out."""
    ticks, seconds, faults = os.sysconf("SC_CLK_TCK"), 0.0, 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        seconds += sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks
        faults += int(fields[7]) + int(fields[8])
    return seconds, faults


def run_pool(task: Task, candidate: Candidate, config: EvalConfig, n: int, workers: int) -> tuple[dict[str, Any], float]:
    """(cost summary of n sequential evaluations, evaluations per second of n submitted at once). The summary also
    has the gym's CPU per evaluation (`cpu_per_evaluation_ms`: the supervisors and everything they reaped; this
    process's own apart) and its minor page faults (`faults_per_evaluation`), over the sequential ones: on a
    machine whose cores are all busy in an RL run, CPU is what an evaluation costs."""
    with EvalPool(workers=workers, config=config) as pool:
        for _ in range(workers):  # the build fills the cache; the reference is timed once
            pool.evaluate(task, candidate)
        pool.cost_log.clear()
        pids = supervisor_pids()
        (cpu_start, faults_start), own_start = cpu_and_faults(pids), time.process_time()
        sequential = [pool.evaluate(task, candidate) for _ in range(n)]
        (cpu_end, faults_end), own_end = cpu_and_faults(pids), time.process_time()
        costs = summarise_costs(pool.cost_log)
        costs["cpu_per_evaluation_ms"] = {"gym": 1000 * (cpu_end - cpu_start) / n, "pool": 1000 * (own_end - own_start) / n,
                                          "supervisors": len(pids)}
        costs["faults_per_evaluation"] = {"minor": (faults_end - faults_start) / n}
        start = time.perf_counter()
        results = [r for _, r in pool.evaluate_many([(task, candidate)] * n)]
        throughput = n / (time.perf_counter() - start)
    bad = [r.feedback for r in sequential + results if r.status != "ok"]
    assert not bad, bad[:1]
    return costs, throughput


def run_large(candidate: Candidate, config: EvalConfig, n: int) -> tuple[dict[str, Any], float]:
    """(cost summary, median ratio of an evaluation's whole cost to its timed calls) for a 2M-element ReLU."""
    with EvalPool(workers=1, config=config) as pool:
        task = sized(2 * 2**20)
        pool.evaluate(task, candidate)
        pool.cost_log.clear()
        for _ in range(n):
            result = pool.evaluate(task, candidate)
            assert result.status == "ok", result.feedback
        ratios = [row["total"] / row["timed_calls"] for row in pool.cost_log]
        return summarise_costs(pool.cost_log), statistics.median(ratios)


def whole_tensor_check(want: Any, got: Any, rtol: float, atol: float) -> bool:
    """The judge's comparison as it was before it went by chunks (`evaluate.compare`): the same arithmetic (the
    largest absolute and relative errors, every element within atol + rtol * |want|) on whole-tensor temporaries."""
    diff = (got - want).abs_()
    scale = want.abs()
    float(diff.max())
    ok = bool((diff <= scale.mul(rtol).add_(atol)).all())
    float(diff.div_(scale.clamp_min_(1e-12)).max())
    return ok


def trial_floor(config: EvalConfig, repeats: int = 7) -> dict[str, float]:
    """The judge's own per-trial work for the 2M-element task (ms, p50, on `config.num_threads` threads): drawing
    its inputs, the reference's forward, comparing a whole output; and that times the correctness trials."""
    import torch

    from kernelrl.evaluate.compare import compare_outputs
    from kernelrl.evaluate.loading import load_module

    reference = load_module(sized(2 * 2**20).source, "bench_task.py", "bench_reference")
    model, threads = reference.Model(), torch.get_num_threads()
    torch.set_num_threads(config.num_threads)
    times: dict[str, list[float]] = {"draw_inputs": [], "reference_forward": [], "compare_output": []}
    whole: list[float] = []
    try:
        with torch.no_grad():
            for _ in range(repeats):
                start = time.perf_counter()
                inputs = reference.get_inputs()
                drawn = time.perf_counter()
                want = model(*[x.clone() for x in inputs])
                ran = time.perf_counter()
                got = want.clone()  # the output as read from the candidate: not part of the comparison
                compared = time.perf_counter()
                outcome = compare_outputs(want, got, 1e-5, 1e-5)
                times["compare_output"].append(1000 * (time.perf_counter() - compared))
                times["draw_inputs"].append(1000 * (drawn - start))
                times["reference_forward"].append(1000 * (ran - drawn))
                assert outcome.ok
                compared = time.perf_counter()
                assert whole_tensor_check(want, got, 1e-5, 1e-5)
                whole.append(1000 * (time.perf_counter() - compared))
    finally:
        torch.set_num_threads(threads)
    floor = {name: statistics.median(values) for name, values in times.items()}
    floor["per_trial"] = sum(floor.values())
    floor["compare_whole_tensor"] = statistics.median(whole)  # beside compare_output, not in the trial's sum
    floor["correctness_trials"] = float(config.correctness_trials)
    floor["all_trials"] = floor["per_trial"] * config.correctness_trials
    return floor


def run_fresh(task: Task, candidate: Candidate, config: EvalConfig, n: int, workers: int) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory() as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps({"task": task.to_dict(), "candidate": candidate.to_dict(), "config": config.to_dict()}))

        def one() -> float:
            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "kernelrl.evaluate.supervisor", "--oneshot", str(job_path)],
                capture_output=True, text=True, check=True,
            )
            wall = time.perf_counter() - start
            result = EvalResult.from_dict(json.loads(proc.stdout)["result"])
            assert result.status == "ok", result.feedback
            return wall - stage_seconds(result)

        overheads = [one() for _ in range(min(n, 10))]
        start = time.perf_counter()
        with cf.ThreadPoolExecutor(workers) as executor:
            list(executor.map(lambda _: one(), range(n)))
        throughput = n / (time.perf_counter() - start)
    return overheads, throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50, help="evaluations per measurement")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fresh", action="store_true", help="also time a fresh process per evaluation (slow)")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/bench_eval_overhead.json")
    args = parser.parse_args()
    candidate, config, small = Candidate(CANDIDATE), EvalConfig(), sized(65536)
    costs, throughput = run_pool(small, candidate, config, args.n, args.workers)
    large, large_ratio = run_large(candidate, config, max(5, args.n // 5))
    floor = trial_floor(config)
    timed_large = large["timed_calls"]["p50_ms"]
    floor_ratio = (timed_large + floor["all_trials"]) / timed_large
    gym_own = costs["gym_own"]["p50_ms"]
    print(f"64k-element ReLU, {args.n} evaluations one after another (builds cached, reference timed once):")
    print("\n".join(costs_table(costs)))
    cpu = costs["cpu_per_evaluation_ms"]
    print(f"CPU per evaluation: {cpu['gym']:.0f} ms in the gym's processes (supervisors, judges, candidates, compilers), "
          f"{cpu['pool']:.1f} ms in the pool's; {costs['faults_per_evaluation']['minor']:.0f} minor page faults; "
          f"the candidate's timed calls {costs['timed_calls']['p50_ms']:.0f} ms (p50)")
    print(f"\nthroughput, {args.n} submitted at once on {args.workers} workers: {throughput:.1f} evaluations/s")
    print(f"2M-element ReLU: evaluation / timed work = {large_ratio:.2f}x "
          f"(timed calls p50 {large['timed_calls']['p50_ms']:.0f} ms of {large['total']['p50_ms']:.0f} ms)")
    print("\n".join(costs_table(large)))
    print(f"its floor on this design: per correctness trial the judge draws the inputs ({floor['draw_inputs']:.1f} ms), runs "
          f"the reference ({floor['reference_forward']:.1f} ms) and compares the whole output ({floor['compare_output']:.1f} ms); "
          f"x {config.correctness_trials} trials = {floor['all_trials']:.0f} ms beside {timed_large:.0f} ms timed: "
          f">= {floor_ratio:.2f}x before any timing, forking or copying")
    print(f"comparing a 2M-element output: {floor['compare_output']:.1f} ms by chunks (the judge) vs "
          f"{floor['compare_whole_tensor']:.1f} ms on whole-tensor temporaries (before), "
          f"{floor['compare_whole_tensor'] / floor['compare_output']:.1f}x")
    record: dict[str, Any] = {
        "small_costs_ms": costs, "large_costs_ms": large, "evals_per_s": throughput, "gym_own_p50_ms": gym_own,
        "large_eval_over_timed_work": large_ratio, "large_trial_floor_ms": floor,
        "large_floor_ratio": floor_ratio, "n": args.n, "workers": args.workers, "parts": list(PARTS)}
    if args.fresh:
        fresh_overheads, fresh_tput = run_fresh(small, candidate, config, min(args.n, 20), args.workers)
        fresh_ms = statistics.median(fresh_overheads) * 1e3
        print(f"fresh process per evaluation: {fresh_ms:.0f} ms outside the stages, {fresh_tput:.2f} evaluations/s "
              f"(the pool: {throughput / fresh_tput:.1f}x more)")
        record |= {"fresh_overhead_ms": fresh_ms, "fresh_evals_per_s": fresh_tput, "throughput_ratio": throughput / fresh_tput}
    print(f"targets: >= 20 evaluations/s: {'met' if throughput >= 20 else 'MISSED'} ({throughput:.1f}); gym's own cost "
          f"<= 25 ms p50: {'met' if gym_own <= 25 else 'MISSED'} ({gym_own:.1f}); 2M-element evaluation <= 1.3x its "
          f"timed work: {'met' if large_ratio <= 1.3 else 'MISSED'} ({large_ratio:.2f})")
    if not args.no_write:
        from results_file import write_result

        print("written:", write_result("bench_eval_overhead", record))


if __name__ == "__main__":
    main()
