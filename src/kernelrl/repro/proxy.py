"""`kernelrl repro proxy`: proxy compression's scaling claim at CPU scale (issue 19).

The claim (proxy compression, Zheng et al. 2026): a byte-level LM trained mostly on compressed views
of its text (plus raw bytes) gains more over byte-only training as models grow, and rivals a
tokenizer-based model. Here, for each of several model sizes, every arm trains the same `ByteLM`
shape for the same FLOPs (`run_experiment`'s pieces: views prepared once, then `train_arms` per
size): byte-only, one arm per compressed view (gzip, BPE tokenizer, neural arithmetic coding after
Lester et al. 2024), and a tokenizer-only baseline. All are scored in bits per raw validation byte;
the tokenizer-only model's total NLL of the validation text's token ids, in bits, is divided by the
text's raw byte count. Writes ``results.json`` (`kernelrl.repro.record`) under the run directory, then
``report.md`` and ``proxy.png`` rendered from it alone.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, model_validator
from rich.console import Console

from kernelrl.config_system import ConfigModel, merge, parse_overrides, validate
from kernelrl.proxy.config import BASELINE, TOKENS_ONLY, ProxyConfig
from kernelrl.proxy.corpus import load_corpus
from kernelrl.proxy.experiment import eval_summary, machine_info, make_progress, prepare_views, train_arms
from kernelrl.proxy.mixing import make_layout
from kernelrl.proxy.model import ModelConfig, count_params
from kernelrl.repro.record import new_record, read_record, write_record
from kernelrl.repro.stats import paired


class ModelSize(ConfigModel):
    """One point of the sweep; the rest of the shape comes from the config's `model`."""

    d_model: int = Field(ge=8)
    n_layers: int = Field(ge=1)
    n_heads: int = Field(ge=1)


class ScalingConfig(ProxyConfig):
    """A `ProxyConfig` run at several model sizes; `train.budget_tokens` is priced per size."""

    sizes: list[ModelSize] = Field(min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1,
                             description="training seeds: every arm at every size once per seed (data and views fixed by `seed`)")
    equal_steps: bool = Field(True, description="also train, at the byte-only arm's steps, every arm whose FLOPs "
                              "buy it other steps (named '<arm> @steps')")

    @model_validator(mode="after")
    def _sizes(self) -> ScalingConfig:
        seen = [(s.d_model, s.n_layers, s.n_heads) for s in self.sizes]
        if len(set(seen)) != len(seen):
            raise ValueError(f"sizes: has duplicates: {seen}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: has duplicates: {self.seeds}")
        if BASELINE not in self.arms:
            raise ValueError(f"arms: must include the byte-only arm {BASELINE!r}: gaps are measured against it")
        for size in self.sizes:
            self.model_at(size)  # each size must make a valid model
        return self

    def model_at(self, size: ModelSize) -> ModelConfig:
        """`model` with `size`'s width, depth and heads (validated)."""
        return ModelConfig.model_validate({**self.model.model_dump(), **size.model_dump()})


_ARMS = [BASELINE, "gzip", "tokenizer", "arith", TOKENS_ONLY]

REPRO: dict[str, Any] = {
    "preset": "repro-proxy",
    "threads": 1,  # on the shared 2-core box one thread was 10-20x faster per step than two
    "arms": _ARMS,
    "seeds": [0, 1, 2],
    "corpus": {"max_train_bytes": 500_000, "max_val_bytes": 32_000, "chunk_bytes": 256},
    "model": {"max_len": 256},
    "train": {"seq_len": 256, "batch_size": 8, "budget_tokens": 300_000, "n_evals": 3, "warmup_steps": 10},
    "tokenizer": {"vocab_size": 512},
    "arith": {"window_bits": 64, "max_window_bytes": 31, "train_steps": 200, "batch_size": 32},
    "sizes": [
        {"d_model": 32, "n_layers": 1, "n_heads": 2},
        {"d_model": 64, "n_layers": 2, "n_heads": 2},
        {"d_model": 128, "n_layers": 3, "n_heads": 4},
    ],
}

SMOKE: dict[str, Any] = {
    "preset": "repro-proxy-smoke",
    "threads": 1,
    "arms": _ARMS,
    "seeds": [0, 1],
    "roundtrip_check_docs": 2,
    "corpus": {"sources": ["stdlib"], "max_train_bytes": 6_000, "max_val_bytes": 1_500, "chunk_bytes": 128},
    "model": {"max_len": 32},
    "train": {"seq_len": 32, "batch_size": 2, "budget_tokens": 300, "n_evals": 1, "warmup_steps": 1,
              "eval_batch_size": 64},
    "tokenizer": {"vocab_size": 300},
    "arith": {"window_bits": 32, "max_window_bytes": 15, "d_model": 16, "n_layers": 1, "n_heads": 1,
              "train_steps": 4, "batch_size": 8},
    "sizes": [
        {"d_model": 8, "n_layers": 1, "n_heads": 1},
        {"d_model": 16, "n_layers": 1, "n_heads": 2},
        {"d_model": 16, "n_layers": 2, "n_heads": 2},
    ],
}


def repro_config(smoke: bool = False, overrides: list[str] | None = None) -> ScalingConfig:
    """The repro's config (`SMOKE` or `REPRO`) with `key=value` overrides laid over it."""
    data = merge(SMOKE if smoke else REPRO, parse_overrides(list(overrides or [])))
    return validate(ScalingConfig, data, "proxy repro config")


def non_embedding_params(cfg: ModelConfig) -> int:
    """Parameters of the transformer blocks and final norm (no input table, no output head)."""
    return count_params(cfg)["compute"] - cfg.d_model * cfg.vocab_size - (256 * cfg.d_model if cfg.raw_head else 0)


def trend(xs: list[float], gaps: list[float]) -> dict[str, Any]:
    """How a gap (arm BPB - byte-only BPB; negative = arm better) moves with size.

    `slope_per_decade`: least-squares slope of the gap against log10(params).
    """
    if len(xs) != len(gaps) or len(xs) < 2:
        raise ValueError("a trend needs at least two sizes with one gap each")
    lx = [math.log10(x) for x in xs]
    mx, my = sum(lx) / len(lx), sum(gaps) / len(gaps)
    var = sum((a - mx) ** 2 for a in lx)
    slope = sum((a - mx) * (b - my) for a, b in zip(lx, gaps, strict=True)) / var if var else 0.0
    steps = [b - a for a, b in itertools.pairwise(gaps)]
    return {
        "first": gaps[0],
        "last": gaps[-1],
        "change": gaps[-1] - gaps[0],
        "slope_per_decade": slope,
        "monotone": all(s < 0 for s in steps) or all(s > 0 for s in steps),
        "favours_arm_as_size_grows": gaps[-1] < gaps[0],
        "better_than_bytes_at": [i for i, g in enumerate(gaps) if g < 0],
    }


EQUAL_STEPS = " @steps"  # suffix of an arm trained at the byte-only arm's steps instead of its FLOPs


def equal_step_arms(cfg: ScalingConfig, plans: list[tuple[ModelSize, Any, float]], vocab: dict[str, int]) -> list[str]:
    """Arms whose equal-FLOPs steps differ from the byte-only arm's at some size (a bigger vocabulary's head
    costs FLOPs): with `cfg.equal_steps` they are trained again at the byte-only arm's steps."""
    if not cfg.equal_steps:
        return []

    def steps(model: Any, arm: str, budget: float) -> int:
        return cfg.train.steps_for(model.model_copy(update={"vocab_size": vocab[arm]}), budget)

    return [a for a in cfg.arms if a != BASELINE
            and any(steps(m, a, b) != steps(m, BASELINE, b) for _, m, b in plans)]


def _train_size(cfg: ScalingConfig, size: ModelSize, model: Any, budget: float, corpus: Any, views: dict[str, Any],
                progress: Any, label: str, step_arms: list[str]) -> dict[str, Any]:
    """Every arm at one size for `budget` FLOPs, then `step_arms` at the byte-only arm's steps."""
    size_cfg = cfg.model_copy(update={"model": model})
    arms = train_arms(size_cfg, corpus, views, budget, progress, label)
    base_steps = next(a["steps"] for a in arms if a["name"] == BASELINE)
    differ = [a for a in step_arms if next(r["steps"] for r in arms if r["name"] == a) != base_steps]
    again = train_arms(size_cfg, corpus, {a: views[a] for a in differ}, budget, progress, label + "equal steps ",
                       steps=base_steps) if differ else []
    for arm in step_arms:  # where the FLOPs already bought the byte-only steps, that run is the equal-steps run
        row = next((r for r in again if r["name"] == arm), None) or dict(next(r for r in arms if r["name"] == arm))
        arms.append({**row, "name": arm + EQUAL_STEPS})
    return {**size.model_dump(), "non_embedding_params": non_embedding_params(model),
            "byte_model_params": count_params(model)["compute"] + count_params(model)["embedding"],
            "budget_flops": budget, "arms": arms}


def _bpb_and_gaps(sizes: list[dict[str, Any]], arms: list[str]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    bpb = {a: [next(r["final_bpb"] for r in s["arms"] if r["name"] == a) for s in sizes] for a in arms}
    gaps = {a: [v - b for v, b in zip(bpb[a], bpb[BASELINE], strict=True)] for a in arms if a != BASELINE}
    return bpb, gaps


def comparisons(seeds: dict[str, Any], arms: list[str]) -> dict[str, Any]:
    """Paired over seeds (positive: the claim holds). ``<arm>: gain grows``: the gap to byte-only at the smallest
    size minus the gap at the largest (the arm gains on byte-only as the model grows); ``<arm> vs tokenizer-only``:
    the tokenizer-only BPB minus the arm's at the largest size (the proxy arm rivals or beats it)."""
    out: dict[str, Any] = {}
    for arm in arms:
        if arm == BASELINE:
            continue
        if arm.startswith(TOKENS_ONLY):  # the baseline the proxy arms are held against, not a proxy arm
            continue
        out[f"{arm}: gain grows"] = paired([d["gaps"][arm][0] - d["gaps"][arm][-1] for d in seeds.values()])
        if TOKENS_ONLY in arms:
            out[f"{arm} vs tokenizer-only"] = paired([d["bpb"][TOKENS_ONLY][-1] - d["bpb"][arm][-1] for d in seeds.values()])
    return out


def run_scaling(cfg: ScalingConfig, out: str | Path, console: Console | None = None) -> dict[str, Any]:
    """Prepare every view once, train every arm at every size for every seed, write the report; returns
    results.json's data (BPB and gaps: means over the seeds; each seed's own under ``seeds``)."""
    console = console or Console()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(cfg.to_yaml())
    torch.set_num_threads(cfg.resolve_threads())
    started, cpu_started, machine_start = time.perf_counter(), time.process_time(), machine_info()
    corpus = load_corpus(cfg.corpus, cfg.seed)
    byte_vocab = make_layout(0, "auto").vocab_size
    plans = []
    for size in cfg.sizes:  # fail fast on a budget too small for any size
        model = cfg.model_at(size).model_copy(update={"vocab_size": byte_vocab})
        budget = cfg.train.flops_budget(model)
        cfg.train.steps_for(model, budget)
        plans.append((size, model, budget))
    per_seed: dict[str, Any] = {}
    with make_progress(console) as progress:
        views = prepare_views(cfg, corpus, progress, out)
        prepare_seconds = time.perf_counter() - started
        step_arms = equal_step_arms(cfg, plans, {a: v.layout.vocab_size for a, v in views.items()})
        arms = [*cfg.arms, *(a + EQUAL_STEPS for a in step_arms)]
        for seed in cfg.seeds:
            seed_cfg = cfg.model_copy(update={"seed": seed})
            t0 = time.perf_counter()
            sizes = [_train_size(seed_cfg, size, model, budget, corpus, views, progress,
                                 f"seed {seed} d{size.d_model}xL{size.n_layers} ", step_arms)
                     for size, model, budget in plans]
            bpb, gaps = _bpb_and_gaps(sizes, arms)
            per_seed[str(seed)] = {"sizes": sizes, "bpb": bpb, "gaps": gaps, "seconds": time.perf_counter() - t0}
    xs = [float(s["non_embedding_params"]) for s in per_seed[str(cfg.seeds[0])]["sizes"]]
    bpb = {a: [sum(d["bpb"][a][i] for d in per_seed.values()) / len(per_seed) for i in range(len(xs))] for a in arms}
    gaps = {a: [v - b for v, b in zip(bpb[a], bpb[BASELINE], strict=True)] for a in arms if a != BASELINE}
    results = {
        **new_record("proxy", cfg.model_dump(mode="json")),
        "seed_list": list(cfg.seeds),
        "preset": cfg.preset,
        "arms": arms,
        "equal_step_arms": step_arms,
        "sizes": per_seed[str(cfg.seeds[0])]["sizes"],
        "bpb": bpb,
        "gaps": gaps,
        "trends": {a: trend(xs, g) for a, g in gaps.items()} if len(xs) >= 2 else {},
        "seeds": per_seed,
        "comparisons": comparisons(per_seed, arms) if len(xs) >= 2 else {},
        "prepare_seconds": prepare_seconds,
        "wall_seconds": time.perf_counter() - started,
        "process_cpu_seconds": time.process_time() - cpu_started,
        "machine_start": machine_start,
        "machine_end": machine_info(),
        "corpus": eval_summary(cfg, corpus),
    }
    results["wall_s"] = results["wall_seconds"]
    write_record(out, json.loads(json.dumps(results, default=float)))
    rewrite_report(out)
    console.print(f"report: {out / 'report.md'}")
    return results


def write_outputs(results: dict[str, Any], out: Path) -> None:
    """report.md and proxy.png from results.json's data."""
    from kernelrl.repro.proxy_report import plot, report

    plot(results, out / "proxy.png")
    (out / "report.md").write_text(report(results))


def rewrite_report(out: str | Path) -> None:
    """Render report.md and proxy.png from a run's results.json alone (no training)."""
    out = Path(out)
    write_outputs(read_record(out), out)

