"""The proxy-compression experiment: a byte-only baseline, proxy-trained arms and a tokenizer-only
baseline at equal compute.

Every arm trains the same `ByteLM` shape (only the id table and head grow with the vocabulary) for
the same training FLOPs and is judged by bits per byte on raw validation bytes. Compressor
preparation (BPE training, the arithmetic coder's model M1, encoding the corpus) is reported but
not counted in the budget, as in Lester et al. (2024).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from kernelrl.proxy.compressors import Compressor, TokenizerCompressor, make_compressor
from kernelrl.proxy.config import BASELINE, TOKENS_ONLY, ProxyConfig
from kernelrl.proxy.corpus import Corpus, load_corpus
from kernelrl.proxy.evaluate import evaluate_symbol_bpb
from kernelrl.proxy.mixing import (
    MixConfig,
    MixedStream,
    VocabLayout,
    make_layout,
    pack_eval,
    pack_eval_symbols,
)
from kernelrl.proxy.model import N_BYTES, ByteLM
from kernelrl.proxy.report import write_reports
from kernelrl.proxy.train import CurvePoint, train_arm


@dataclass
class View:
    """One arm's training data: compressed symbols per training document (None for the baseline)."""

    name: str
    layout: VocabLayout
    symbols: list[np.ndarray] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    compressor: Compressor | None = None
    val_symbols: list[np.ndarray] | None = None  # validation documents' symbols (tokenizer-only arm)


def make_progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )


def prepare_view(
    name: str, cfg: ProxyConfig, corpus: Corpus, progress: Progress | None = None, out: Path | None = None
) -> View:
    """Fit compressor `name` on the training split, encode every training document, check round trips."""
    t0 = time.perf_counter()
    comp: Compressor = make_compressor(name, cfg.options_for(name))
    info: dict[str, Any] = {"compressor": name, **comp.fit(corpus.train_docs, seed=cfg.seed)}
    task = progress.add_task(f"encode {name}", total=len(corpus.train_docs)) if progress else None

    def tick(done: int) -> None:
        if progress is not None and task is not None:
            progress.update(task, completed=done)

    serialise = comp.symbol_vocab > N_BYTES and cfg.embeddings == "shared"
    if serialise:  # ids do not fit in 256 shared embeddings: the model reads the serialised bytes
        symbols = [np.frombuffer(comp.compress(d), dtype=np.uint8).astype(np.int64) for d in corpus.train_docs]
        tick(len(corpus.train_docs))
        vocab = N_BYTES
    else:
        symbols = comp.symbols_many(corpus.train_docs, on_progress=tick)
        vocab = comp.symbol_vocab
    layout = make_layout(vocab, cfg.embeddings)
    raw_bytes = sum(map(len, corpus.train_docs))
    checked = corpus.val_docs[: cfg.roundtrip_check_docs]
    roundtrip_ok = all(comp.decompress(comp.compress(d)) == d for d in checked)
    if not roundtrip_ok:
        raise RuntimeError(f"compressor {name!r} failed to round-trip a validation document")
    if out is not None and isinstance(comp, TokenizerCompressor):
        (out / "tokenizer.json").write_text(comp.to_json())
    info.update(
        view="serialised bytes" if serialise else ("ids (separate embeddings)" if layout.separate else "bytes"),
        symbol_vocab=vocab,
        separate_embeddings=layout.separate,
        symbols_per_raw_byte=sum(map(len, symbols)) / raw_bytes,
        serialised_bytes_per_raw_byte=sum(map(len, symbols)) / raw_bytes * (1 if serialise else comp.bytes_per_symbol),
        roundtrip_checked_docs=len(checked),
        roundtrip_ok=roundtrip_ok,
        prepare_seconds=time.perf_counter() - t0,
    )
    return View(name, layout, symbols, info, comp)


def machine_info() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "loadavg_1_5_15": list(load),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def prepare_views(cfg: ProxyConfig, corpus: Corpus, progress: Progress | None = None, out: Path | None = None) -> dict[str, View]:
    """One `View` per arm of `cfg`; each compressor is fitted once (the tokenizer-only arm reuses the
    tokenizer arm's fitted BPE and ids, so both read the same tokens)."""
    prepared: dict[str, View] = {}
    needed = [a for a in cfg.arms if a not in (BASELINE, TOKENS_ONLY)]
    if TOKENS_ONLY in cfg.arms and "tokenizer" not in needed:
        needed.append("tokenizer")
    for name in needed:
        prepared[name] = prepare_view(name, cfg, corpus, progress, out)
        info = prepared[name].info
        if progress is not None:
            progress.console.print(
                f"  {name}: {info['symbols_per_raw_byte']:.3f} symbols per raw byte, "
                f"vocab {info['symbol_vocab']}, prepared in {info['prepare_seconds']:.0f} s"
            )
    views: dict[str, View] = {}
    for arm in cfg.arms:
        if arm == BASELINE:
            views[arm] = View(arm, make_layout(0, "auto"), None, {"compressor": None, "view": "raw bytes only"})
        elif arm == TOKENS_ONLY:
            tok = prepared["tokenizer"]
            assert tok.compressor is not None
            info = {**tok.info, "view": "tokenizer ids only (no raw bytes)"}
            val_symbols = tok.compressor.symbols_many(corpus.val_docs)
            views[arm] = View(arm, tok.layout, tok.symbols, info, tok.compressor, val_symbols)
        else:
            views[arm] = prepared[arm]
    return views


def train_arms(
    cfg: ProxyConfig,
    corpus: Corpus,
    views: dict[str, View],
    budget: float,
    progress: Progress,
    label: str = "",
    steps: int | None = None,
) -> list[dict[str, Any]]:
    """Train every view's arm with `cfg.model`'s shape for `budget` FLOPs (or, with `steps`, every arm for
    that many steps whatever it costs); results in `views` order.

    Arms reading raw bytes are scored on the raw validation bytes; the tokenizer-only arm on the
    tokenizer's ids of the same text, converted to bits per raw byte (`evaluate_symbol_bpb`).
    """
    val = pack_eval(corpus.val_docs, cfg.train.seq_len, pad_tail=True)
    val_bytes = sum(map(len, corpus.val_docs))
    plans = {}
    for arm, view in views.items():
        model_cfg = cfg.model.model_copy(update={"vocab_size": view.layout.vocab_size})
        plans[arm] = (model_cfg, steps if steps is not None else cfg.train.steps_for(model_cfg, budget))
    overall = progress.add_task(f"train {label}(all arms)", total=sum(s for _, s in plans.values()))
    results: list[dict[str, Any]] = []
    for arm, (model_cfg, arm_steps) in plans.items():
        view = views[arm]
        evaluator = None
        if arm == BASELINE:
            mix = MixConfig(p_compressed=0.0, translation_start=0.0)
        elif arm == TOKENS_ONLY:
            assert view.val_symbols is not None
            mix = MixConfig(p_compressed=1.0, translation_start=0.0)
            sym_val = pack_eval_symbols(view.val_symbols, view.layout, cfg.train.seq_len)

            def evaluator(model: ByteLM, sym_val: tuple[torch.Tensor, torch.Tensor] = sym_val) -> float:
                return evaluate_symbol_bpb(model, *sym_val, val_bytes, batch_size=cfg.train.eval_batch_size)
        else:
            mix = cfg.mix
        stream = MixedStream(corpus.train_docs, view.symbols, view.layout, mix, seed=cfg.seed)
        task = progress.add_task(f"train {label}{arm}", total=arm_steps)

        def on_step(step: int, loss: float, task: Any = task, arm: str = arm) -> None:
            progress.update(task, completed=step, description=f"train {label}{arm} loss {loss:.3f}")
            progress.advance(overall)

        def on_eval(point: CurvePoint, arm: str = arm, total: int = arm_steps) -> None:
            progress.console.print(
                f"  {label}{arm}: step {point.step}/{total}, val BPB {point.val_bpb:.4f}, {point.seconds:.0f} s"
            )

        result = train_arm(arm, model_cfg, stream, val, cfg.train, arm_steps, cfg.seed, on_step, on_eval, evaluator)
        result.compressor = view.info
        results.append(result.as_dict())
        progress.console.print(f"[bold]{label}{arm}[/]: val BPB (raw bytes) {result.final_bpb:.4f} after {arm_steps} steps")
    return results


def eval_summary(cfg: ProxyConfig, corpus: Corpus) -> dict[str, Any]:
    """Corpus facts plus what the evaluation scores (every validation byte, once)."""
    val = pack_eval(corpus.val_docs, cfg.train.seq_len, pad_tail=True)
    return {**corpus.summary(), "val_eval_rows": int(val[0].shape[0]), "val_eval_bytes": int(val[1][:, 1:].sum())}


def run_experiment(cfg: ProxyConfig, out: Path, console: Console | None = None) -> dict[str, Any]:
    """Run every arm of `cfg`, write config, JSON, Markdown and PNG into `out`, return the results."""
    console = console or Console()
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(cfg.to_yaml())
    console.print(Panel(cfg.to_yaml().rstrip(), title=f"kernelrl proxy run ({cfg.preset})", expand=False))
    torch.set_num_threads(cfg.resolve_threads())
    started, cpu_started, machine_start = time.perf_counter(), time.process_time(), machine_info()

    corpus = load_corpus(cfg.corpus, cfg.seed)
    base_model = cfg.model.model_copy(update={"vocab_size": make_layout(0, "auto").vocab_size})
    budget = cfg.train.flops_budget(base_model)
    cfg.train.steps_for(base_model, budget)  # fail fast on a budget that is too small
    console.print(
        f"corpus: {len(corpus.train_files)} train files / {len(corpus.val_docs)} val docs, "
        f"{sum(map(len, corpus.train_docs)):,} train bytes; budget {budget:.3g} FLOPs per arm"
    )
    with make_progress(console) as progress:
        views = prepare_views(cfg, corpus, progress, out)
        results = train_arms(cfg, corpus, views, budget, progress)

    summary = {
        "preset": cfg.preset,
        "budget_flops": budget,
        "wall_seconds": time.perf_counter() - started,
        "process_cpu_seconds": time.process_time() - cpu_started,
        "machine_start": machine_start,
        "machine_end": machine_info(),
        "corpus": eval_summary(cfg, corpus),
        "arms": results,
        "config": cfg.model_dump(mode="json"),
    }
    paths = write_reports(summary, out)
    console.print(paths["markdown"].read_text())
    console.print(f"outputs in {out}: " + ", ".join(p.name for p in paths.values()))
    return summary
