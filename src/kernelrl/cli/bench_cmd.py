"""`kernelrl bench`: run a policy over a task suite (resumable), report, compare runs, export trajectories."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from kernelrl.backend_names import BACKEND_NAMES
from kernelrl.cli.config_args import add_config_arguments, resolve_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark a policy on a task suite", description=__doc__)
    p.add_argument("--suite", help="task file, directory (KernelBench layout) or JSONL dataset (default: the "
                                   "config's suite)")
    # the policy flags set the config's `policy` section (policy.name, policy.model, ...; defaults there)
    p.add_argument("--policy", help="policy.name: openai | transformers | scripted (the default) | nki-draft (scripted "
                                    "NKI author: first drafts with typical NKI mistakes, fixed from the gym's "
                                    "feedback; --backend nki, tasks with a shipped NKI kernel)")
    p.add_argument("--model", help="policy.model: model name (openai) or local path (transformers)")
    p.add_argument("--base-url", help="policy.base_url: OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key-env", help="policy.api_key_env: environment variable holding the API key")
    p.add_argument("--answers", help="policy.answers: scripted policy's answers file, directory, or an earlier "
                                     "results.jsonl")
    p.add_argument("--temperature", type=float, help="policy.temperature")
    p.add_argument("--max-tokens", type=int, help="policy.max_tokens: tokens per model answer")
    p.add_argument("--max-concurrency", type=int, help="policy.max_concurrency: requests in flight to the endpoint")
    p.add_argument("--max-batch", type=int, help="policy.max_batch: transformers, requests generated together")
    p.add_argument("--retries", type=int, help="policy.retries: retries per request (exponential backoff)")
    p.add_argument("--request-timeout", type=float, help="policy.request_timeout: seconds per request")
    add_config_arguments(p, "bench config (YAML/JSON: samples, episode, eval, concurrency, policy) laid over the "
                            "defaults; --set and the flags override it")
    p.add_argument("--samples", type=int, help="episodes per task (K for pass@k; default 1)")
    p.add_argument("--turns", type=int, help="maximum turns per episode (default 1)")
    p.add_argument("--history", choices=["all", "last"], help="conversation kept between turns (default all)")
    p.add_argument("--feedback", choices=["text", "json"], help="feedback format (default text)")
    p.add_argument("--feedback-tokens", type=int, help="token budget of one feedback message (default 512)")
    p.add_argument("--target-speedup", type=float, help="stop an episode once a correct kernel is this fast")
    p.add_argument("--tools", action="store_true", default=None, help="tool-calling variant (compile/verify/profile)")
    p.add_argument("--backend", choices=BACKEND_NAMES, help="kernel backend (default cpu)")
    p.add_argument("--out", default="runs/bench", help="run directory (results.jsonl, report.md, plots/)")
    p.add_argument("--workers", type=int, help="evaluation workers (default: one per core or GPU)")
    p.add_argument("--concurrency", type=int, help="episodes in flight (default 8)")
    p.add_argument("--trials", type=int, help="correctness trials (default 5)")
    p.add_argument("--timing-trials", type=int, help="timing trials (default 20)")
    p.add_argument("--compile-baseline", action="store_true", default=None, help="also time torch.compile(reference)")
    p.add_argument("--threads", type=int, help="CPU threads per evaluation (default 1)")
    p.add_argument("--max-mb", type=float, help="shrink each task's sizes to fit this many MB")
    p.add_argument("--seed", type=int, help="base sampling seed (default 0)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=run)
    actions = p.add_subparsers(dest="bench_command", metavar="ACTION")
    cmp = actions.add_parser("compare", help="two runs side by side")
    cmp.add_argument("run_a")
    cmp.add_argument("run_b")
    cmp.add_argument("--markdown", help="also write the comparison to this file")
    cmp.set_defaults(handler=run_compare)
    rep = actions.add_parser("report", help="(re)write report.md and plots for a run directory")
    rep.add_argument("run_dir")
    rep.set_defaults(handler=run_report)
    exp = actions.add_parser("export", help="trajectories as JSONL for SFT / rejection fine-tuning")
    exp.add_argument("run_dir")
    exp.add_argument("--mode", choices=["turns", "sft", "rft"], default="turns")
    exp.add_argument("--min-speedup", type=float)
    exp.add_argument("--output", required=True)
    exp.set_defaults(handler=run_export)


# flag -> (section, key) of BenchConfig.to_dict(); a flag given on the command line wins over --config.
OVERRIDES = {
    "samples": ((), "samples"),
    "concurrency": ((), "concurrency"),
    "turns": (("episode",), "max_turns"),
    "history": (("episode",), "history"),
    "feedback": (("episode",), "feedback_mode"),
    "feedback_tokens": (("episode",), "feedback_tokens"),
    "target_speedup": (("episode",), "target_speedup"),
    "tools": (("episode",), "tools"),
    "seed": (("episode",), "seed"),
    "backend": (("episode", "prompt"), "backend"),
    "trials": (("eval",), "correctness_trials"),
    "timing_trials": (("eval",), "timing_trials"),
    "compile_baseline": (("eval",), "compile_baseline"),
    "threads": (("eval",), "num_threads"),
    **{flag: (("policy",), flag) for flag in ("model", "base_url", "api_key_env", "answers", "temperature",
                                              "max_tokens", "max_concurrency", "max_batch", "retries",
                                              "request_timeout")},
    "policy": (("policy",), "name"),
}


def bench_config(args: argparse.Namespace) -> Any:
    """The run's config: defaults, then --config, then --set overrides, then explicit flags; validated once."""
    from kernelrl.bench import BenchConfig
    from kernelrl.config_system import flatten, layers, merge, validate

    stack = layers(path=args.config, overrides=list(getattr(args, "set", []) or []))
    data = flatten(stack)
    for flag, (path, key) in OVERRIDES.items():
        value = getattr(args, flag)
        if value is not None:
            section: dict[str, Any] = {key: value}
            for part in reversed(path):
                section = {part: section}
            data = merge(data, section)
    if args.suite:
        data["suite"] = str(args.suite)
    return validate(BenchConfig, data, "bench config", stack)


def _check_policy_name(name: str) -> None:
    """The policy registry knows `name` (checked with the config, before any work)."""
    import kernelrl.agent.policies  # noqa: F401  (registers the built-in policies)
    from kernelrl.agent.policies.base import POLICIES
    from kernelrl.config_system import ConfigError

    if name not in POLICIES:
        raise ConfigError([f"policy.name: unknown policy {name!r}; known: {', '.join(POLICIES)}"], "bench config")


def build_policy(config: Any) -> Any:
    """The policy of the `BenchConfig`'s `policy` section; a ValueError names a missing setting."""
    import os

    from kernelrl.agent import make_policy

    p = config.policy
    if p.name == "scripted":
        if not p.answers:
            raise ValueError("--policy scripted needs --answers (policy.answers)")
        return make_policy("scripted", answers=p.answers)
    if p.name in ("openai", "http"):
        if not p.model:
            raise ValueError("--policy openai needs --model (policy.model)")
        return make_policy(
            "openai", model=p.model, base_url=p.base_url, api_key=os.environ.get(p.api_key_env),
            max_concurrency=p.max_concurrency, max_retries=p.retries, timeout_s=p.request_timeout,
            temperature=p.temperature, max_tokens=p.max_tokens,
        )
    if p.name in ("transformers", "local"):
        if not p.model:
            raise ValueError("--policy transformers needs --model (policy.model, a local path)")
        return make_policy("transformers", model=p.model, max_tokens=p.max_tokens, temperature=p.temperature,
                           max_batch=p.max_batch)
    if p.name == "nki-draft":
        backend = config.episode.prompt.backend
        if backend != "nki":
            raise ValueError(f"--policy nki-draft writes NKI kernels only; pass --backend nki (got backend {backend!r})")
        return make_policy("nki-draft", seed=config.episode.seed)
    return make_policy(p.name)


def run(args: argparse.Namespace) -> int:
    from kernelrl.bench import ResumeMismatch, run_bench, write_report
    from kernelrl.tasks import TaskError, load_tasks

    def build() -> Any:
        loaded = bench_config(args)
        _check_policy_name(loaded.policy.name)
        return loaded

    config, status = resolve_config("bench", build, args.print_config)
    if status is not None:
        return status
    suite = args.suite or config.suite  # the flag, or the config's `suite`
    if not suite:
        print("error: --suite is required (or use an action: compare, report, export)", file=sys.stderr)
        return 2
    try:
        tasks = load_tasks(suite, max_bytes=int(args.max_mb * 2**20) if args.max_mb else None)
        policy = build_policy(config)
    except (TaskError, ValueError, FileNotFoundError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if config.samples > 1 and config.policy.temperature == 0 and config.policy.name not in ("scripted", "nki-draft"):
        print("note: --samples > 1 at --temperature 0 gives near-identical samples; pass@k>1 needs sampling",
              file=sys.stderr)
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"bench: {len(tasks)} tasks x {config.samples} samples, up to {config.episode.max_turns} turn(s), "
          f"policy {policy.name}, backend {config.episode.prompt.backend}, out {args.out}", file=sys.stderr)
    print("config: " + json.dumps(config.to_dict(), separators=(",", ":")), file=sys.stderr)
    try:
        result = run_bench(tasks, policy, args.out, config, workers=args.workers, progress=not args.no_progress)
    except ResumeMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"ran {result.ran} episode(s), skipped {result.skipped} already finished"
          + (f", {result.errors} failed with errors (not recorded; run again to retry)" if result.errors else ""),
          file=sys.stderr)
    summary = write_report(result.trajectories, result.directory, title=f"kernelrl bench: {policy.name} on {suite}")
    print_summary(summary, result.directory)
    return 130 if result.interrupted else 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def print_summary(summary: dict[str, Any], directory: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from kernelrl.bench.report import metric_rows

    table = Table(title=f"{directory}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for label, value in metric_rows(summary["overall"]):
        table.add_row(label, value)
    console = Console()
    console.print(table)
    console.print(f"report: {directory / 'report.md'}")


def _load_summary(run_dir: str) -> dict[str, Any]:
    from kernelrl.bench import RunStore, summarize

    return summarize(RunStore(run_dir).load())


def run_compare(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from kernelrl.bench.report import compare_markdown

    for d in (args.run_a, args.run_b):
        if not (Path(d) / "results.jsonl").exists():
            print(f"error: {d}: no results.jsonl", file=sys.stderr)
            return 2
    a, b = _load_summary(args.run_a), _load_summary(args.run_b)
    text = compare_markdown(a, b, args.run_a, args.run_b)
    table = Table(title="bench compare")
    for column in ("metric", args.run_a, args.run_b):
        table.add_column(column)
    for line in text.splitlines()[2:]:
        table.add_row(*[c.strip() for c in line.strip("|").split("|")])
    Console(width=160).print(table)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from kernelrl.bench import RunStore, write_report

    trajectories = RunStore(args.run_dir).load()
    if not trajectories:
        print(f"error: {args.run_dir}: no results", file=sys.stderr)
        return 2
    summary = write_report(trajectories, args.run_dir)
    print_summary(summary, Path(args.run_dir))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from kernelrl.bench import RunStore, export_jsonl

    count = export_jsonl(RunStore(args.run_dir).load(), args.output, args.mode, args.min_speedup)
    print(f"wrote {count} record(s) to {args.output}")
    return 0
