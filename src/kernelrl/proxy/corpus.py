"""Code corpus available offline: the interpreter's standard-library `.py` sources plus the project's
own `.py` files, split BY FILE into train and validation (deterministic for a seed), cut into
documents of at most `chunk_bytes` bytes at line boundaries.
"""

from __future__ import annotations

import os
import random
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field

import kernelrl
from kernelrl.config_system import ConfigModel


class CorpusConfig(ConfigModel):
    """Where the code comes from and how much of it is used."""

    sources: list[Literal["stdlib", "project"]] = Field(default_factory=lambda: ["stdlib", "project"])
    extra_paths: list[str] = Field(default_factory=list, description="more files or folders of .py files")
    exclude_dirs: list[str] = Field(default_factory=lambda: ["site-packages", "dist-packages", "__pycache__"])
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    max_train_bytes: int = Field(1_500_000, ge=1)
    max_val_bytes: int = Field(64_000, ge=1)
    max_file_bytes: int = Field(200_000, ge=1)
    chunk_bytes: int = Field(256, ge=16)


@dataclass
class Corpus:
    """Files and documents of each split; `train_files`/`val_files` are disjoint file names."""

    train_files: list[str]
    val_files: list[str]
    train_docs: list[bytes]
    val_docs: list[bytes]
    skipped_large: int = 0
    roots: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, int | dict[str, str]]:
        return {
            "train_files": len(self.train_files),
            "val_files": len(self.val_files),
            "train_docs": len(self.train_docs),
            "val_docs": len(self.val_docs),
            "train_bytes": sum(map(len, self.train_docs)),
            "val_bytes": sum(map(len, self.val_docs)),
            "skipped_large_files": self.skipped_large,
            "roots": self.roots,
        }


def source_roots(cfg: CorpusConfig) -> dict[str, Path]:
    """Name -> folder (or file) for every configured source."""
    roots: dict[str, Path] = {}
    if "stdlib" in cfg.sources:
        roots["stdlib"] = Path(sysconfig.get_paths()["stdlib"])
    if "project" in cfg.sources:
        roots["kernelrl"] = Path(kernelrl.__file__).resolve().parent
    for i, extra in enumerate(cfg.extra_paths):
        path = Path(extra)
        if not path.exists():
            raise FileNotFoundError(f"corpus extra path does not exist: {extra}")
        roots[f"extra{i}"] = path
    return roots


def discover_files(cfg: CorpusConfig) -> list[tuple[str, Path]]:
    """All `.py` files of the sources as (stable name, path), sorted by name; excluded folders are pruned."""
    found: dict[str, Path] = {}
    excluded = set(cfg.exclude_dirs)
    for name, root in source_roots(cfg).items():
        if root.is_file():
            found.setdefault(f"{name}/{root.name}", root)
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in excluded)
            rel = Path(folder).relative_to(root)
            for file in files:
                if file.endswith(".py"):
                    found.setdefault(f"{name}/{(rel / file).as_posix()}", Path(folder) / file)
    return sorted(found.items())


def chunk_document(data: bytes, chunk_bytes: int) -> list[bytes]:
    """Cut `data` into pieces of at most `chunk_bytes`, breaking after newlines where possible.

    Concatenating the pieces gives `data` back.
    """
    out: list[bytes] = []
    start = 0
    while start < len(data):
        end = min(start + chunk_bytes, len(data))
        if end < len(data):
            cut = data.rfind(b"\n", start, end)
            if cut >= start:
                end = cut + 1
        out.append(data[start:end])
        start = end
    return out


def load_corpus(cfg: CorpusConfig, seed: int) -> Corpus:
    """Shuffle files with `seed`, send each to validation with probability `val_fraction`, fill each
    split in shuffled order up to its byte cap, and cut files into documents."""
    files = discover_files(cfg)
    if not files:
        raise ValueError(f"empty corpus: no .py files found in {sorted(map(str, source_roots(cfg).values()))}")
    rng = random.Random(seed)
    rng.shuffle(files)
    split: dict[str, list[tuple[str, bytes]]] = {"train": [], "val": []}
    size = {"train": 0, "val": 0}
    cap = {"train": cfg.max_train_bytes, "val": cfg.max_val_bytes}
    skipped = 0
    for name, path in files:
        side = "val" if rng.random() < cfg.val_fraction else "train"
        if size[side] >= cap[side]:
            if size["train"] >= cap["train"] and size["val"] >= cap["val"]:
                break
            continue
        data = path.read_bytes()
        if len(data) > cfg.max_file_bytes:
            skipped += 1
            continue
        if not data.strip():
            continue
        data = data[: cap[side] - size[side]]
        split[side].append((name, data))
        size[side] += len(data)
    for side in ("train", "val"):
        if not split[side]:
            raise ValueError(
                f"empty corpus: the {side} split got no files ({len(files)} found, "
                f"val_fraction={cfg.val_fraction}); add files or change the split"
            )
    return Corpus(
        train_files=[n for n, _ in split["train"]],
        val_files=[n for n, _ in split["val"]],
        train_docs=[c for _, d in split["train"] for c in chunk_document(d, cfg.chunk_bytes)],
        val_docs=[c for _, d in split["val"] for c in chunk_document(d, cfg.chunk_bytes)],
        skipped_large=skipped,
        roots={k: str(v) for k, v in source_roots(cfg).items()},
    )
