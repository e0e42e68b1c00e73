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


class ModelSize(ConfigModel):
    """One point of the sweep; the rest of the shape comes from the config's `model`."""

    d_model: int = Field(ge=8)
    n_layers: int = Field(ge=1)
    n_heads: int = Field(ge=1)


class ScalingConfig(ProxyConfig):
    """A `ProxyConfig` run at several model sizes; `train.budget_tokens` is priced per size."""

    sizes: list[ModelSize] = Field(min_length=1)

    @model_validator(mode="after")
    def _sizes(self) -> ScalingConfig:
        seen = [(s.d_model, s.n_layers, s.n_heads) for s in self.sizes]
        if len(set(seen)) != len(seen):
            raise ValueError(f"sizes: has duplicates: {seen}")
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


def run_scaling(cfg: ScalingConfig, out: str | Path, console: Console | None = None) -> dict[str, Any]:
    """Prepare every view once, train every arm at every size, write the report; returns results.json's data."""
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
    sizes = []
    with make_progress(console) as progress:
        views = prepare_views(cfg, corpus, progress, out)
        prepare_seconds = time.perf_counter() - started
        for size, model, budget in plans:
            label = f"d{size.d_model}xL{size.n_layers} "
            size_cfg = cfg.model_copy(update={"model": model})
            arms = train_arms(size_cfg, corpus, views, budget, progress, label)
            sizes.append({
                **size.model_dump(),
                "non_embedding_params": non_embedding_params(model),
                "byte_model_params": count_params(model)["compute"] + count_params(model)["embedding"],
                "budget_flops": budget,
                "arms": arms,
            })
    xs = [float(s["non_embedding_params"]) for s in sizes]
    bpb = {a: [next(r["final_bpb"] for r in s["arms"] if r["name"] == a) for s in sizes] for a in cfg.arms}
    gaps = {a: [v - b for v, b in zip(bpb[a], bpb[BASELINE], strict=True)] for a in cfg.arms if a != BASELINE}
    results = {
        **new_record("proxy", cfg.model_dump(mode="json")),
        "seed_list": [cfg.seed],  # one seed: every arm and size trains from `seed`
        "preset": cfg.preset,
        "arms": cfg.arms,
        "sizes": sizes,
        "bpb": bpb,
        "gaps": gaps,
        "trends": {a: trend(xs, g) for a, g in gaps.items()} if len(xs) >= 2 else {},
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

